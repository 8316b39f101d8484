"""TF Serving gRPC API: ovmsclient unchanged, and plain stubs from our generated protos."""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import ovmsclient
import pytest

from protos.gen.tensorflow.core.framework import tensor_pb2, types_pb2
from protos.gen.tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)
from tests.handlers.grpc_server.helpers import Server, decode_like_ovms, direct, jpeg

RNG = np.random.default_rng(7)


def _xml(repo: Path, name: str, version: int = 1) -> Path:
    return repo / name / str(version) / "model.xml"


# -- ovmsclient -----------------------------------------------------------------------------------


def test_ovmsclient_predict_matches_openvino(server: Server, repo: Path) -> None:
    client = ovmsclient.make_grpc_client(server.target)
    x = RNG.random((2, 3, 224, 224), dtype=np.float32)
    got = client.predict({"input": x}, "classifier")
    want = direct(_xml(repo, "classifier"), {"input": x})["probabilities"]
    assert got.shape == (2, 1000)
    assert np.allclose(got, want, rtol=1e-3, atol=1e-5)
    a, b = RNG.random((3, 4), dtype=np.float32), RNG.random((3, 4), dtype=np.float32)
    both = client.predict({"a": a, "b": b}, "two_inputs")
    assert set(both) == {"sum", "product"}
    assert np.allclose(both["sum"], a + b) and np.allclose(both["product"], a * b)


def test_ovmsclient_versions(server: Server) -> None:
    client = ovmsclient.make_grpc_client(server.target)
    x = np.ones((1, 4), np.float32)
    assert np.allclose(client.predict({"x": x}, "scaler"), 3.0)  # default = latest
    assert np.allclose(client.predict({"x": x}, "scaler", model_version=1), 2.0)
    assert np.allclose(client.predict({"x": x}, "scaler", model_version=2), 3.0)


def test_ovmsclient_metadata_and_status(server: Server) -> None:
    client = ovmsclient.make_grpc_client(server.target)
    meta = client.get_model_metadata("classifier")
    assert meta == {
        "model_version": 1,
        "inputs": {"input": {"shape": [-1, 3, 224, 224], "dtype": "DT_FLOAT"}},
        "outputs": {"probabilities": {"shape": [-1, 1000], "dtype": "DT_FLOAT"}},
    }
    assert client.get_model_metadata("scaler", 1)["model_version"] == 1
    status = client.get_model_status("scaler")
    assert status == {
        v: {"state": "AVAILABLE", "error_code": 0, "error_message": "OK"} for v in (1, 2)
    }
    assert list(client.get_model_status("scaler", 1)) == [1]


def test_ovmsclient_errors(server: Server) -> None:
    client = ovmsclient.make_grpc_client(server.target)
    with pytest.raises(ovmsclient.ModelNotFoundError):
        client.predict({"x": np.ones((1, 4), np.float32)}, "missing")
    with pytest.raises(ovmsclient.InvalidInputError, match="input name: x"):
        client.predict({"x": np.ones((1, 5), np.float32)}, "scaler")


# -- plain stubs ----------------------------------------------------------------------------------


def _request(
    name: str, version: int = 0, **inputs: tensor_pb2.TensorProto
) -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = name
    if version:
        request.model_spec.version.value = version
    for key, proto in inputs.items():
        request.inputs[key].CopyFrom(proto)
    return request


def _tensor(dtype: int, shape: tuple[int, ...], **fields: object) -> tensor_pb2.TensorProto:
    proto = tensor_pb2.TensorProto(dtype=dtype, **fields)  # type: ignore[arg-type]
    for size in shape:
        proto.tensor_shape.dim.add(size=size)
    return proto


def _array(proto: tensor_pb2.TensorProto) -> np.ndarray:
    assert proto.dtype == types_pb2.DT_FLOAT
    shape = [d.size for d in proto.tensor_shape.dim]
    return np.frombuffer(proto.tensor_content, np.float32).reshape(shape)


def test_stub_predict_tensor_content_and_float_val(channel: grpc.Channel) -> None:
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    x = RNG.random((2, 4), dtype=np.float32)
    content = _tensor(types_pb2.DT_FLOAT, x.shape, tensor_content=x.tobytes())
    reply = stub.Predict(_request("scaler", 1, x=content), timeout=10)
    assert reply.model_spec.name == "scaler" and reply.model_spec.version.value == 1
    assert np.allclose(_array(reply.outputs["y"]), 2 * x)
    typed = _tensor(types_pb2.DT_FLOAT, x.shape, float_val=x.ravel().tolist())
    reply = stub.Predict(_request("scaler", x=typed), timeout=10)
    assert reply.model_spec.version.value == 2  # version 0 answered by the default (latest)
    assert np.allclose(_array(reply.outputs["y"]), 3 * x)


def test_stub_predict_half_val_rejected_by_precision(channel: grpc.Channel) -> None:
    """half_val bit patterns decode to FP16; the FP32 model then names the precision."""
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    bits = np.ones(4, np.float16).view(np.uint16).tolist()
    half = _tensor(types_pb2.DT_HALF, (1, 4), half_val=bits)
    with pytest.raises(grpc.RpcError) as caught:
        stub.Predict(_request("scaler", x=half), timeout=10)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "Expected: FP32; Actual: FP16" in str(caught.value.details())


def test_stub_metadata_and_status(channel: grpc.Channel) -> None:
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    request.model_spec.name = "two_inputs"
    reply = stub.GetModelMetadata(request, timeout=10)
    assert reply.model_spec.version.value == 1
    signatures = get_model_metadata_pb2.SignatureDefMap()
    assert reply.metadata["signature_def"].Unpack(signatures)
    serving = signatures.signature_def["serving_default"]
    assert sorted(serving.inputs) == ["a", "b"] and sorted(serving.outputs) == ["product", "sum"]
    assert [d.size for d in serving.inputs["a"].tensor_shape.dim] == [-1, 4]
    assert serving.inputs["a"].dtype == types_pb2.DT_FLOAT
    models = model_service_pb2_grpc.ModelServiceStub(channel)
    status_request = get_model_status_pb2.GetModelStatusRequest()
    status_request.model_spec.name = "scaler"
    statuses = models.GetModelStatus(status_request, timeout=10).model_version_status
    assert [(s.version, s.state, s.status.error_message) for s in statuses] == [
        (1, get_model_status_pb2.ModelVersionStatus.AVAILABLE, "OK"),
        (2, get_model_status_pb2.ModelVersionStatus.AVAILABLE, "OK"),
    ]
    reload = models.HandleReloadConfigRequest(
        model_management_pb2.ReloadConfigRequest(), timeout=30
    )
    assert reload.status.error_code == 0


def test_stub_jpeg_string_val(channel: grpc.Channel, repo: Path) -> None:
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    images = [jpeg(320, 240, seed=1), jpeg(200, 300, seed=2)]
    proto = _tensor(types_pb2.DT_STRING, (2,), string_val=images)
    reply = stub.Predict(_request("classifier", input=proto), timeout=10)
    got = _array(reply.outputs["probabilities"])
    batch = np.stack([decode_like_ovms(image) for image in images])
    want = direct(_xml(repo, "classifier"), {"input": batch})["probabilities"]
    assert got.shape == (2, 1000)
    assert np.allclose(got, want, rtol=1e-3, atol=1e-5)


def test_stub_output_filter_names_each_output_once(channel: grpc.Channel) -> None:
    """An output named twice in output_filter is refused as TF Serving refuses it (it used to
    come back once, its shape written twice: [2, 4, 2, 4] over 8 values)."""
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    a, b = RNG.random((2, 4), dtype=np.float32), RNG.random((2, 4), dtype=np.float32)
    request = _request(
        "two_inputs",
        a=_tensor(types_pb2.DT_FLOAT, a.shape, tensor_content=a.tobytes()),
        b=_tensor(types_pb2.DT_FLOAT, b.shape, tensor_content=b.tobytes()),
    )
    request.output_filter.extend(["sum", "sum"])
    with pytest.raises(grpc.RpcError) as caught:
        stub.Predict(request, timeout=10)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == "duplicate output tensor alias: sum"
    del request.output_filter[:]
    request.output_filter.extend(["product", "sum"])
    reply = stub.Predict(request, timeout=10)
    assert sorted(reply.outputs) == ["product", "sum"]
    assert np.allclose(_array(reply.outputs["sum"]), a + b)
    assert np.allclose(_array(reply.outputs["product"]), a * b)
