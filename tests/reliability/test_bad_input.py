"""Hostile and malformed requests over REST and gRPC: each gets its status code and message,
nothing is allocated for declared-but-absent data, and the next good request still succeeds.
(The everyday mistakes are in tests/core/test_serving_errors.py; this covers limits and abuse.)
"""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np
import pytest
import requests

from protos.gen.kserve import grpc_predict_v2_pb2 as kfs
from protos.gen.kserve import grpc_predict_v2_pb2_grpc
from protos.gen.tensorflow.core.framework import types_pb2
from protos.gen.tensorflow_serving.apis import (
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)
from tests.core.helpers import RunningServer, kserve_binary_request
from tests.reliability.helpers import (
    SCALER_X,
    png_declaring,
    rss_bytes,
    zeros_png,
)

HUGE = [100000, 100000, 100]  # 1e12 elements: 4 TB as FP32
ELEMENTS = "declares more than 1000000 elements (the limit)"
BOMB = "Image parsing failed - the image exceeds the limit of 1000000 pixels"
PNG = zeros_png(300, 300)
JPEG_HEAD = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00"


def kserve(shape: list[int], data: Any, datatype: str = "FP32", name: str = "x") -> bytes:
    return json.dumps(
        {"inputs": [{"name": name, "shape": shape, "datatype": datatype, "data": data}]}
    ).encode()


def tfs_image(data: bytes) -> bytes:
    return json.dumps({"instances": [{"b64": base64.b64encode(data).decode()}]}).encode()


@dataclass(frozen=True)
class Case:
    id: str
    method: str
    path: str
    status: int
    message: str  # the error text contains this
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


HUGE_BINARY = kserve_binary_request(
    {
        "inputs": [
            {"name": "x", "shape": HUGE, "datatype": "FP32", "parameters": {"binary_data_size": 16}}
        ]
    },
    b"\0" * 16,
)
NESTED = b"[" * 100_000

CASES = [
    # limits, checked before allocating
    Case(
        "huge-shape-kserve-json", "POST", "/v2/models/scaler/infer", 400, ELEMENTS, kserve(HUGE, [])
    ),
    Case(
        "huge-shape-kserve-binary", "POST", "/v2/models/scaler/infer", 400, ELEMENTS, *HUGE_BINARY
    ),
    Case(
        "zero-times-huge-kserve-json",
        "POST",
        "/v2/models/scaler/infer",
        400,
        ELEMENTS,
        kserve([0, 2**62], []),
    ),  # no elements, yet numpy cannot shape it: was a 500
    Case(
        "zero-times-huge-kserve-binary",
        "POST",
        "/v2/models/scaler/infer",
        400,
        ELEMENTS,
        *kserve_binary_request(
            {
                "inputs": [
                    {
                        "name": "x",
                        "shape": [0, 2**40, 2**40],
                        "datatype": "FP32",
                        "parameters": {"binary_data_size": 0},
                    }
                ]
            },
            b"",
        ),
    ),
    Case(
        "max-tensor-elements",
        "POST",
        "/v2/models/scaler/infer",
        400,
        ELEMENTS,
        kserve([250_001, 4], []),
    ),
    Case(
        "max-tensor-bytes",
        "POST",
        "/v2/models/scaler/infer",
        400,
        "of 2400000 bytes exceeds the limit of 2000000 bytes",
        kserve([1, 300_000], [], "FP64"),
    ),
    Case(
        "png-bomb-declared-10G-pixels",
        "POST",
        "/v1/models/classifier_nhwc:predict",
        400,
        BOMB,
        tfs_image(png_declaring(100_000, 100_000)),
    ),
    Case(
        "png-over-pixel-limit",
        "POST",
        "/v1/models/classifier_nhwc:predict",
        400,
        "1100x1000 pixels exceed the limit of 1000000 pixels",
        tfs_image(zeros_png(1000, 1100)),
    ),
    Case(
        "truncated-png",
        "POST",
        "/v1/models/classifier_nhwc:predict",
        400,
        "Image parsing failed",
        tfs_image(PNG[: len(PNG) // 2]),
    ),
    Case(
        "jpeg-header-only",
        "POST",
        "/v1/models/classifier_nhwc:predict",
        400,
        "Image parsing failed",
        tfs_image(JPEG_HEAD),
    ),
    Case(
        "b64-non-ascii",
        "POST",
        "/v1/models/classifier_nhwc:predict",
        400,
        "Decode Base64 to string error",
        json.dumps({"instances": [{"b64": "ß☃=="}]}).encode(),
    ),
    Case(
        "b64-with-extra-key",
        "POST",
        "/v1/models/classifier_nhwc:predict",
        400,
        'Binary values must be {"b64": "<base64>"} objects only',
        json.dumps({"inputs": {"input": [{"b64": "AAAA", "x": 1}]}}).encode(),
    ),
    # JSON abuse
    Case(
        "not-json-kserve",
        "POST",
        "/v2/models/scaler/infer",
        412,
        "The file is not valid json",
        b"hello",
    ),
    Case(
        "nested-100k-tfs",
        "POST",
        "/v1/models/scaler:predict",
        412,
        "The file is not valid json",
        NESTED,
    ),
    Case(
        "nested-100k-in-instances",
        "POST",
        "/v1/models/scaler:predict",
        412,
        "The file is not valid json",
        b'{"instances":' + NESTED + b"]" * 100_000 + b"}",
    ),
    Case(
        "nested-100k-kserve",
        "POST",
        "/v2/models/scaler/infer",
        412,
        "The file is not valid json",
        b'{"inputs":' + NESTED + b"]" * 100_000 + b"}",
    ),
    Case(
        "ragged-kserve-data",
        "POST",
        "/v2/models/scaler/infer",
        400,
        "Invalid data for input x",
        kserve([2, 4], [[1, 2, 3, 4], [1, 2]]),
    ),
    Case(
        "nan-literal-tfs",
        "POST",
        "/v1/models/scaler:predict",
        412,
        "The file is not valid json",
        b'{"instances": [[NaN, 1, 2, 3]]}',
    ),
    Case(
        "infinity-literal-tfs",
        "POST",
        "/v1/models/scaler:predict",
        412,
        "The file is not valid json",
        b'{"instances": [[Infinity, 1, 2, 3]]}',
    ),
    Case(
        "nan-literal-kserve",
        "POST",
        "/v2/models/scaler/infer",
        412,
        "The file is not valid json",
        b'{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,NaN,2,3]}]}',
    ),
    Case(
        "strings-for-float-kserve",
        "POST",
        "/v2/models/scaler/infer",
        400,
        "Invalid data for input x: expected numbers",
        kserve([1, 4], ["a", "b", "c", "d"]),
    ),
    Case(
        "strings-for-float-tfs",
        "POST",
        "/v1/models/scaler:predict",
        400,
        "resource not configured to accept NHWC layout",
        json.dumps({"instances": [["a", "b", "c", "d"]]}).encode(),
    ),
    Case(
        "unicode-input-name",
        "POST",
        "/v2/models/scaler/infer",
        400,
        "Missing input with specific name - Required input: x",
        kserve([1, 4], [1, 2, 3, 4], name="ß☃𝄞"),
    ),
    # names and versions that must never reach the file system
    Case(
        "unicode-model-name",
        "POST",
        "/v2/models/%C3%9F%E2%98%83/infer",
        404,
        "Model with requested name is not found",
        kserve([1, 4], [1, 2, 3, 4]),
    ),
    Case("encoded-slash-name", "GET", "/v1/models/..%2Fscaler", 400, "Invalid request URL"),
    Case("encoded-slash", "GET", "/v1/models/a%2Fb", 404, ""),
    Case("nul-in-name", "GET", "/v1/models/sca%00ler", 400, "Invalid request URL"),
    Case("over-long-name", "GET", "/v1/models/" + "a" * 3000, 400, "Invalid request URL"),
    Case(
        "long-but-legal-name",
        "GET",
        "/v2/models/" + "a" * 1500,
        404,
        "Model with requested name is not found",
    ),
    Case(
        "over-long-version",
        "GET",
        "/v1/models/scaler/versions/" + "9" * 30,
        400,
        "Invalid model version",
    ),
    Case(
        "dot-dot-version", "POST", "/v2/models/scaler/versions/../infer", 400, "Invalid request URL"
    ),
    Case("negative-version", "GET", "/v1/models/scaler/versions/-1", 404, "Invalid request URL"),
    # routes and methods
    Case("unknown-root", "GET", "/etc/passwd", 404, "Invalid request URL"),
    Case("put-infer", "PUT", "/v2/models/scaler/infer", 405, "Unsupported method PUT"),
    Case("post-metrics", "POST", "/metrics", 405, "Unsupported method POST"),
    Case("patch-config", "PATCH", "/v1/config", 405, "Unsupported method PATCH"),
]


def send(server: RunningServer, case: Case) -> requests.Response:
    """Send the path exactly as written (requests would normalise `..` and encode NUL)."""
    prepared = requests.Request(
        case.method, server.url + "/x", data=case.body, headers=case.headers
    ).prepare()
    prepared.url = server.url + case.path
    return server.session.send(prepared, timeout=30)


def assert_rest_ok(server: RunningServer) -> None:
    response = server.post("/v1/models/scaler:predict", {"instances": SCALER_X})
    assert response.status_code == 200, response.text
    assert response.json() == {"predictions": [[3.0, 6.0, 9.0, 12.0]]}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rest_bad_input(limited: RunningServer, case: Case) -> None:
    response = send(limited, case)
    assert response.status_code == case.status, response.text[:300]
    if case.message:
        doc = response.json()
        assert set(doc) == {"error"}, doc
        assert case.message in doc["error"], doc["error"]
    assert_rest_ok(limited)


def test_huge_shapes_allocate_nothing(limited: RunningServer) -> None:
    pid = limited.process.pid
    before = rss_bytes(pid)
    for _ in range(20):
        for case in CASES[:4]:
            assert send(limited, case).status_code == 400
        with grpc.insecure_channel(limited.grpc_target) as channel:  # type: ignore[attr-defined]
            for call, _, _ in _grpc_limit_calls(channel):
                with pytest.raises(grpc.RpcError):
                    call()
    assert rss_bytes(pid) - before < 64 << 20
    assert_rest_ok(limited)


def test_lying_content_length_is_413_without_waiting(limited: RunningServer) -> None:
    with socket.create_connection(("127.0.0.1", limited.port), timeout=5) as sock:
        sock.sendall(
            b"POST /v1/models/scaler:predict HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: 1000000000000\r\nConnection: close\r\n\r\n{"
        )
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b"exceeds the limit of 1048576 bytes" in reply
    assert_rest_ok(limited)


# -- gRPC --------------------------------------------------------------------------------------


def _tfs(
    name: str = "scaler",
    shape: tuple[int, ...] = (1, 4),
    content: bytes | None = None,
    version: int | None = None,
) -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = name
    if version is not None:
        request.model_spec.version.value = version
    tensor = request.inputs["x"]
    tensor.dtype = types_pb2.DT_FLOAT
    for size in shape:
        tensor.tensor_shape.dim.add(size=size)
    tensor.tensor_content = np.ones(4, np.float32).tobytes() if content is None else content
    return request


def _kfs(
    shape: list[int], raw: bytes = b"\0" * 16, name: str = "scaler", datatype: str = "FP32"
) -> kfs.ModelInferRequest:
    request = kfs.ModelInferRequest(model_name=name)
    request.inputs.add(name="x", datatype=datatype, shape=shape)
    request.raw_input_contents.append(raw)
    return request


GrpcCall = tuple[Callable[[], object], grpc.StatusCode, str]


def _grpc_limit_calls(channel: grpc.Channel) -> list[GrpcCall]:
    tfs = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    kserve = grpc_predict_v2_pb2_grpc.GRPCInferenceServiceStub(channel)
    invalid = grpc.StatusCode.INVALID_ARGUMENT
    return [
        (
            lambda: tfs.Predict(_tfs(shape=tuple(HUGE), content=b"\0" * 16), timeout=10),
            invalid,
            ELEMENTS,
        ),
        (lambda: kserve.ModelInfer(_kfs(HUGE), timeout=10), invalid, ELEMENTS),
        (
            lambda: kserve.ModelInfer(_kfs([1, 300_000], datatype="FP64"), timeout=10),
            invalid,
            "exceeds the limit of 2000000 bytes",
        ),
        (lambda: kserve.ModelInfer(_kfs([0, 2**62], raw=b""), timeout=10), invalid, ELEMENTS),
        (
            lambda: kserve.ModelInfer(_kfs([0, 2**62], raw=b"", datatype="BYTES"), timeout=10),
            invalid,
            ELEMENTS,
        ),
        (lambda: tfs.Predict(_tfs(shape=(0, 2**62), content=b""), timeout=10), invalid, ELEMENTS),
    ]


def _grpc_calls(channel: grpc.Channel) -> list[GrpcCall]:
    tfs = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    status = model_service_pb2_grpc.ModelServiceStub(channel)
    kserve = grpc_predict_v2_pb2_grpc.GRPCInferenceServiceStub(channel)
    not_found, invalid = grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT
    status_request = get_model_status_pb2.GetModelStatusRequest()
    status_request.model_spec.name = "../scaler"
    image = predict_pb2.PredictRequest()
    image.model_spec.name = "classifier_nhwc"
    image.inputs["input"].dtype = types_pb2.DT_STRING
    image.inputs["input"].tensor_shape.dim.add(size=1)
    image.inputs["input"].string_val.append(png_declaring(100_000, 100_000))
    truncated = predict_pb2.PredictRequest()
    truncated.CopyFrom(image)
    truncated.inputs["input"].string_val[0] = PNG[: len(PNG) // 2]
    return [
        *_grpc_limit_calls(channel),
        (lambda: tfs.Predict(image, timeout=10), invalid, BOMB),
        (lambda: tfs.Predict(truncated, timeout=10), invalid, "Image parsing failed"),
        (lambda: tfs.Predict(_tfs(name="../scaler"), timeout=10), not_found, "../scaler"),
        (lambda: tfs.Predict(_tfs(name="/etc/passwd"), timeout=10), not_found, "passwd"),
        (lambda: tfs.Predict(_tfs(name="sca\x00ler"), timeout=10), not_found, "not found"),
        (lambda: tfs.Predict(_tfs(name="ß☃" * 2000), timeout=10), not_found, "not found"),
        (lambda: status.GetModelStatus(status_request, timeout=10), not_found, "not found"),
        (
            lambda: kserve.ModelInfer(_kfs([1, 4], name="%2F..%2Fx"), timeout=10),
            not_found,
            "not found",
        ),
        (
            lambda: kserve.ModelInfer(
                kfs.ModelInferRequest(model_name="scaler", model_version="../1"), timeout=10
            ),
            invalid,
            "invalid format",
        ),
        (
            lambda: kserve.ModelInfer(
                kfs.ModelInferRequest(model_name="scaler", model_version="9" * 40), timeout=10
            ),
            invalid,
            "invalid format",
        ),
        (
            lambda: tfs.Predict(_tfs(content=b"\0" * (2 << 20)), timeout=10),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "",
        ),
    ]


def test_grpc_bad_input(limited: RunningServer) -> None:
    with grpc.insecure_channel(limited.grpc_target) as channel:  # type: ignore[attr-defined]
        tfs = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        for call, code, text in _grpc_calls(channel):
            with pytest.raises(grpc.RpcError) as caught:
                call()
            details = str(caught.value.details())
            assert caught.value.code() == code, details
            assert text in details, details
            good = tfs.Predict(_tfs(), timeout=10)
            assert np.allclose(np.frombuffer(good.outputs["y"].tensor_content, np.float32), 3.0)
