"""Warm gRPC latency and throughput of the 224x224 classifier vs raw OpenVINO, same run.

    python -m bench.grpc_latency [--count 200] [--clients 8]

Cases: raw OpenVINO (one InferRequest for 1 client; AsyncInferQueue with `clients` jobs for
throughput), gRPC TF Serving Predict with tensor_content, gRPC KServe ModelInfer with
raw_input_contents. The server is `ov-serverless serve --port P` (REST + gRPC, one process);
the clients are threads of this process sharing one channel.
"""

from __future__ import annotations

import argparse
import os
import platform
import threading
import time
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
import numpy as np
import openvino as ov

from bench.common import free_port, latencies, save, server, summary, workdir
from demo.models import classifier
from demo.models import save as save_model
from protos.gen.kserve import grpc_predict_v2_pb2 as kfs
from protos.gen.kserve import grpc_predict_v2_pb2_grpc
from protos.gen.tensorflow.core.framework import types_pb2
from protos.gen.tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

Row = dict[str, float]


def one_client(call: Callable[[], object], count: int) -> Row:
    times = latencies(call, count)
    return {**summary(times), "throughput_rps": len(times) / sum(times)}


def many_clients(call: Callable[[], object], count: int, clients: int) -> Row:
    barrier = threading.Barrier(clients + 1)

    def client(_: int) -> list[float]:
        for _ in range(5):
            call()
        barrier.wait()
        return latencies(call, count, warmup=0)

    with futures.ThreadPoolExecutor(clients) as pool:
        running = [pool.submit(client, i) for i in range(clients)]
        barrier.wait()
        started = time.perf_counter()
        times = [t for job in running for t in job.result()]
        wall = time.perf_counter() - started
    return {**summary(times), "throughput_rps": len(times) / wall}


def raw_queue(compiled: ov.CompiledModel, x: np.ndarray, total: int, jobs: int) -> Row:
    """AsyncInferQueue with `jobs` requests; a latency includes waiting for a free request."""
    queue = ov.AsyncInferQueue(compiled, jobs)
    times: list[float] = []
    queue.set_callback(lambda request, sent: times.append(time.perf_counter() - sent))
    for _ in range(2 * jobs):
        queue.start_async({0: x}, time.perf_counter())
    queue.wait_all()
    times.clear()
    started = time.perf_counter()
    for _ in range(total):
        queue.start_async({0: x}, time.perf_counter())
    queue.wait_all()
    wall = time.perf_counter() - started
    return {**summary(times), "throughput_rps": total / wall}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=200, help="calls per client")
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    count, clients = args.count, args.clients
    root = workdir()
    xml = save_model(classifier(seed=0, batch=1), root / "classifier" / "1")
    config = root / "config.json"
    config.write_text('{"model_config_list": [{"config": {"name": "classifier", '
                      '"base_path": "classifier"}}]}')
    x = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
    compiled = ov.Core().compile_model(str(xml), "CPU", {"PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()
    rows: dict[str, dict[str, Row]] = {"raw openvino": {
        "1": one_client(lambda: request.infer({0: x}), count),
        str(clients): raw_queue(compiled, x, count * clients, clients),
    }}
    port = free_port()
    with server(config, "--port", str(port)), \
            grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        grpc.channel_ready_future(channel).result(timeout=60)
        for name, call in _grpc_calls(channel, x).items():
            rows[name] = {"1": one_client(call, count),
                          str(clients): many_clients(call, count, clients)}
    _report(rows, clients)
    save("grpc_latency", {"machine": platform.platform(), "cpus": os.cpu_count(),
                          "openvino": ov.__version__, "grpcio": grpc.__version__,
                          "count_per_client": count, "clients": clients, "rows": rows})


def _grpc_calls(channel: grpc.Channel, x: np.ndarray) -> dict[str, Callable[[], Any]]:
    tfs = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    predict = predict_pb2.PredictRequest()
    predict.model_spec.name = "classifier"
    tensor = predict.inputs["input"]
    tensor.dtype = types_pb2.DT_FLOAT
    for size in x.shape:
        tensor.tensor_shape.dim.add(size=size)
    tensor.tensor_content = x.tobytes()
    kserve = grpc_predict_v2_pb2_grpc.GRPCInferenceServiceStub(channel)
    infer = kfs.ModelInferRequest(model_name="classifier")
    infer.inputs.add(name="input", datatype="FP32", shape=list(x.shape))
    infer.raw_input_contents.append(x.tobytes())
    return {
        "gRPC TFS tensor_content": lambda: tfs.Predict(predict, timeout=30),
        "gRPC KServe raw": lambda: kserve.ModelInfer(infer, timeout=30),
    }


def _report(rows: dict[str, dict[str, Row]], clients: int) -> None:
    raw_p50 = rows["raw openvino"]["1"]["p50_ms"]
    raw_rps = rows["raw openvino"][str(clients)]["throughput_rps"]
    print(f"{'case':24} {'clients':>7} {'p50 ms':>8} {'p90 ms':>8} {'req/s':>9} "
          f"{'vs raw':>8}")
    for name, by_clients in rows.items():
        for label, row in by_clients.items():
            if label == "1":
                row["ratio"] = row["p50_ms"] / raw_p50  # latency: lower is better
            else:
                row["ratio"] = row["throughput_rps"] / raw_rps  # throughput: higher is better
            print(f"{name:24} {label:>7} {row['p50_ms']:8.2f} {row['p90_ms']:8.2f} "
                  f"{row['throughput_rps']:9.1f} {row['ratio']:7.2f}x")


if __name__ == "__main__":
    main()
