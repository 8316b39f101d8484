"""Warm-path cases: one prepared request per (transport, encoding), sent by plain clients.

Every case is a factory: each client thread calls it once for its own connection (http.client
keep-alive, or a gRPC channel) and then calls the returned function per request. Payloads are
encoded once, up front, so the client's per-call cost is the transport only. The same factories
drive ov-serverless and the peer server.
"""

from __future__ import annotations

import base64
import http.client
import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

Call = Callable[[], object]
Factory = Callable[[], Call]

REST_TFS_JSON = "REST TFS JSON"
REST_KSERVE_JSON = "REST KServe JSON"
REST_KSERVE_BINARY = "REST KServe binary"
REST_JPEG = "REST TFS jpeg (b64)"
GRPC_TFS = "gRPC TFS tensor_content"
GRPC_KSERVE = "gRPC KServe raw"
ALL_CASES = (REST_TFS_JSON, REST_KSERVE_JSON, REST_KSERVE_BINARY, REST_JPEG, GRPC_TFS, GRPC_KSERVE)
PEER_CASES = (REST_KSERVE_JSON, GRPC_KSERVE)  # what MLServer speaks (no REST binary, no TFS)


@dataclass(frozen=True)
class Payload:
    model: str
    x: np.ndarray  # the input tensor, [N,3,224,224] f32
    jpeg: bytes  # a 224x224 image for the jpeg case

    @property
    def tfs_json(self) -> bytes:
        return orjson.dumps({"instances": self.x.tolist()})

    @property
    def kserve_json(self) -> bytes:
        return orjson.dumps(
            {
                "inputs": [
                    {
                        "name": "input",
                        "shape": list(self.x.shape),
                        "datatype": "FP32",
                        "data": self.x.reshape(-1).tolist(),
                    }
                ]
            }
        )


def make_jpeg(size: int = 224, seed: int = 0) -> bytes:
    """A deterministic photo-like RGB jpeg (smooth gradients + a little noise), quality 90."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    rgb = np.stack([xx, yy, 0.5 + 0.5 * np.sin(6 * (xx + yy))], axis=-1) * 200
    rgb += rng.normal(0, 8, rgb.shape)
    buffer = io.BytesIO()
    Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8)).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def rest(port: int, path: str, body: bytes, headers: dict[str, str]) -> Factory:
    def factory() -> Call:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

        def call() -> bytes:
            conn.request("POST", path, body, headers)
            response = conn.getresponse()
            data = response.read()
            if response.status != 200:
                raise RuntimeError(f"{path}: {response.status} {data[:300]!r}")
            return data

        return call

    return factory


def kserve_binary(model: str, x: np.ndarray) -> dict[str, Any]:
    """The KServe binary-tensor request for `x` (path, body, headers), binary reply asked."""
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "input",
                    "shape": list(x.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ],
            "parameters": {"binary_data_output": True},
        }
    )
    return {
        "path": f"/v2/models/{model}/infer",
        "body": header + x.tobytes(),
        "headers": {
            "Inference-Header-Content-Length": str(len(header)),
            "Content-Type": "application/octet-stream",
        },
    }


def rest_cases(port: int, payload: Payload, cases: tuple[str, ...]) -> dict[str, Factory]:
    x, name = payload.x, payload.model
    json_headers = {"Content-Type": "application/json"}
    made: dict[str, Factory] = {}
    if REST_TFS_JSON in cases:
        made[REST_TFS_JSON] = rest(
            port, f"/v1/models/{name}:predict", payload.tfs_json, json_headers
        )
    if REST_KSERVE_JSON in cases:
        made[REST_KSERVE_JSON] = rest(
            port, f"/v2/models/{name}/infer", payload.kserve_json, json_headers
        )
    if REST_KSERVE_BINARY in cases:
        binary = kserve_binary(name, x)
        made[REST_KSERVE_BINARY] = rest(port, binary["path"], binary["body"], binary["headers"])
    if REST_JPEG in cases:
        images = [{"b64": base64.b64encode(payload.jpeg).decode()}] * x.shape[0]
        made[REST_JPEG] = rest(
            port, f"/v1/models/{name}:predict", orjson.dumps({"instances": images}), json_headers
        )
    return made


def grpc_cases(port: int, payload: Payload, cases: tuple[str, ...]) -> dict[str, Factory]:
    import grpc

    from protos.gen.kserve import grpc_predict_v2_pb2 as kfs
    from protos.gen.kserve import grpc_predict_v2_pb2_grpc
    from protos.gen.tensorflow.core.framework import types_pb2
    from protos.gen.tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    x = payload.x
    options = [
        ("grpc.max_receive_message_length", 1 << 30),
        ("grpc.max_send_message_length", 1 << 30),
    ]
    predict = predict_pb2.PredictRequest()
    predict.model_spec.name = payload.model
    tensor = predict.inputs["input"]
    tensor.dtype = types_pb2.DT_FLOAT
    for size in x.shape:
        tensor.tensor_shape.dim.add(size=size)
    tensor.tensor_content = x.tobytes()
    infer = kfs.ModelInferRequest(model_name=payload.model)
    infer.inputs.add(name="input", datatype="FP32", shape=list(x.shape))
    infer.raw_input_contents.append(x.tobytes())

    def tfs() -> Call:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=options)
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        return lambda: stub.Predict(predict, timeout=60)

    def kserve() -> Call:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=options)
        stub = grpc_predict_v2_pb2_grpc.GRPCInferenceServiceStub(channel)
        return lambda: stub.ModelInfer(infer, timeout=60)

    made: dict[str, Factory] = {}
    if GRPC_TFS in cases:
        made[GRPC_TFS] = tfs
    if GRPC_KSERVE in cases:
        made[GRPC_KSERVE] = kserve
    return made
