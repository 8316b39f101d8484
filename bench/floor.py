"""The transport floor: one round trip of the served request when the server does nothing for
as long as the model computes (it sleeps the raw p50), paired with a bare sleep; over HTTP
(the REST KServe binary request) and over gRPC (KServe ModelInfer, raw contents).

Its p50 ratio is the lowest any server on that transport could reach on this machine for that
model. It is well above the cost of the same round trip without the wait: threads left idle
for ~20 ms wake up slowly on this VM, and a raw InferRequest called back to back never pays it.

    python -m bench.floor PORT SECONDS [grpc]   # the server (handlers.http_server, or grpc)
"""

from __future__ import annotations

import sys
import time
from typing import Any

from bench import cases
from bench.common import Row, base_env, free_port, http_ok, paired, process

REPLY = b"\0" * 4096  # about the size of the binary case's reply (1000 FP32 + header)


def measure(http: dict[str, Any], seconds: float, count: int) -> Row:
    port = free_port()
    cmd = [sys.executable, "-m", "bench.floor", str(port), str(seconds)]
    with process(cmd, base_env(), lambda: http_ok(port, "/ready")):
        call = cases.rest(port, http["path"], http["body"], http["headers"])()
        return _against_sleep(call, seconds, count)


def measure_grpc(payload: cases.Payload, seconds: float, count: int) -> Row:
    port = free_port()
    cmd = [sys.executable, "-m", "bench.floor", str(port), str(seconds), "grpc"]
    with process(cmd, base_env(), lambda: _grpc_ready(port)):
        call = cases.grpc_cases(port, payload, (cases.GRPC_KSERVE,))[cases.GRPC_KSERVE]()
        return _against_sleep(call, seconds, count)


def _against_sleep(call: cases.Call, seconds: float, count: int) -> Row:
    served, raw = paired(call, lambda: time.sleep(seconds), count)
    return {
        **served,
        "raw_p50_ms": raw["p50_ms"],
        "p50_ratio": served["p50_ms"] / raw["p50_ms"],
        "sleep_ms": seconds * 1e3,
    }


def _grpc_ready(port: int) -> bool:
    import grpc

    from protos.gen.kserve import grpc_predict_v2_pb2 as pb
    from protos.gen.kserve import grpc_predict_v2_pb2_grpc as service

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            stub = service.GRPCInferenceServiceStub(channel)
            return bool(stub.ServerReady(pb.ServerReadyRequest(), timeout=1).ready)
        except grpc.RpcError:
            return False


def main(argv: list[str]) -> int:
    port, seconds = int(argv[0]), float(argv[1])
    if argv[2:] == ["grpc"]:
        return _serve_grpc(port, seconds)
    from core.api import Request, Response
    from handlers import http_server

    def handle(request: Request) -> Response:
        if request.method == "POST":
            time.sleep(seconds)
        return Response(200, REPLY, {"content-type": "application/octet-stream"})

    server = http_server.Server(
        handle,
        http_server.listen("127.0.0.1", port),
        threads=4,
        read_timeout=30.0,
        max_body=1 << 26,
    )
    server.serve_forever()
    return 0


def _serve_grpc(port: int, seconds: float) -> int:
    """KServe ModelInfer that parses the request (as any gRPC server must), sleeps and answers
    a prebuilt reply; the options and (up to 4 cores) the pool size of handlers.grpc_server."""
    from concurrent import futures

    import grpc

    from protos.gen.kserve import grpc_predict_v2_pb2 as pb
    from protos.gen.kserve import grpc_predict_v2_pb2_grpc as service

    reply = pb.ModelInferResponse(model_name="floor")
    reply.outputs.add(name="output", datatype="FP32", shape=[1, len(REPLY) // 4])
    reply.raw_output_contents.append(REPLY)

    class Floor(service.GRPCInferenceServiceServicer):
        def ServerReady(self, request: Any, context: Any) -> Any:  # noqa: N802
            return pb.ServerReadyResponse(ready=True)

        def ModelInfer(self, request: Any, context: Any) -> Any:  # noqa: N802
            time.sleep(seconds)
            return reply

    server = grpc.server(
        futures.ThreadPoolExecutor(8),
        options=[
            ("grpc.max_receive_message_length", 1 << 30),
            ("grpc.max_send_message_length", 1 << 30),
        ],
    )
    service.add_GRPCInferenceServiceServicer_to_server(Floor(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
