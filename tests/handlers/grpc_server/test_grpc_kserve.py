"""KServe v2 gRPC: tritonclient.grpc unchanged, and typed `contents` through our stubs.

tritonclient registers package `inference` in protobuf's default pool; ours live in
protos.pool.POOL, so both import into this one process (checked first).
"""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton
from tritonclient.utils import InferenceServerException

from protos.gen.kserve import grpc_predict_v2_pb2 as pb
from protos.gen.kserve import grpc_predict_v2_pb2_grpc
from tests.handlers.grpc_server.helpers import Server, decode_like_ovms, direct, jpeg

RNG = np.random.default_rng(11)


def test_both_kserve_modules_coexist() -> None:
    from google.protobuf import descriptor_pool

    from protos.pool import POOL

    default = descriptor_pool.Default().FindMessageTypeByName("inference.ModelInferRequest")
    ours = POOL.FindMessageTypeByName("inference.ModelInferRequest")
    assert default is not ours
    assert pb.ModelInferRequest.DESCRIPTOR is ours
    assert triton.service_pb2.ModelInferRequest.DESCRIPTOR is default


def test_tritonclient_infer_matches_openvino(server: Server, repo: Path) -> None:
    client = triton.InferenceServerClient(server.target)
    x = RNG.random((2, 3, 224, 224), dtype=np.float32)
    tensor = triton.InferInput("input", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer("classifier", [tensor], request_id="req-7")
    want = direct(repo / "classifier" / "1" / "model.xml", {"input": x})["probabilities"]
    got = result.as_numpy("probabilities")
    assert got is not None and np.allclose(got, want, rtol=1e-3, atol=1e-5)
    response = result.get_response()
    assert response.id == "req-7" and response.model_version == "1"


def test_tritonclient_requested_outputs_and_versions(server: Server) -> None:
    client = triton.InferenceServerClient(server.target)
    a, b = RNG.random((2, 4), dtype=np.float32), RNG.random((2, 4), dtype=np.float32)
    inputs = [triton.InferInput("a", [2, 4], "FP32"), triton.InferInput("b", [2, 4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("two_inputs", inputs, outputs=[triton.InferRequestedOutput("product")])
    assert [o.name for o in result.get_response().outputs] == ["product"]
    assert np.allclose(result.as_numpy("product"), a * b)
    x = triton.InferInput("x", [1, 4], "FP32")
    x.set_data_from_numpy(np.ones((1, 4), np.float32))
    assert np.allclose(client.infer("scaler", [x], model_version="1").as_numpy("y"), 2.0)
    assert np.allclose(client.infer("scaler", [x]).as_numpy("y"), 3.0)


def test_tritonclient_metadata_and_readiness(server: Server) -> None:
    client = triton.InferenceServerClient(server.target)
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("classifier") and client.is_model_ready("scaler", "1")
    assert not client.is_model_ready("empty")
    meta = client.get_model_metadata("scaler", as_json=True)
    assert meta == {
        "name": "scaler",
        "versions": ["1", "2"],
        "platform": "OpenVINO",
        "inputs": [{"name": "x", "datatype": "FP32", "shape": ["-1", "4"]}],
        "outputs": [{"name": "y", "datatype": "FP32", "shape": ["-1", "4"]}],
    }
    assert client.get_server_metadata().name
    with pytest.raises(InferenceServerException, match="not found"):
        client.is_model_ready("missing")
    # tensors sorted by name as OVMS lists them, not in the model's order (sum, product)
    two = client.get_model_metadata("two_inputs", as_json=True)
    assert [t["name"] for t in two["inputs"]] == ["a", "b"]
    assert [t["name"] for t in two["outputs"]] == ["product", "sum"]


def test_typed_contents_and_raw_exclusive(channel: grpc.Channel) -> None:
    stub = grpc_predict_v2_pb2_grpc.GRPCInferenceServiceStub(channel)
    request = pb.ModelInferRequest(model_name="scaler", model_version="1")
    tensor = request.inputs.add(name="x", datatype="FP32", shape=[1, 4])
    tensor.contents.fp32_contents.extend([1, 2, 3, 4])
    reply = stub.ModelInfer(request, timeout=10)
    assert np.allclose(np.frombuffer(reply.raw_output_contents[0], np.float32), [2, 4, 6, 8])
    request.raw_input_contents.append(np.ones(4, np.float32).tobytes())
    with pytest.raises(grpc.RpcError) as caught:
        stub.ModelInfer(request, timeout=10)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "raw_input_contents" in str(caught.value.details())


def test_tritonclient_bytes_jpeg_to_image_input(server: Server, repo: Path) -> None:
    """BYTES raw contents (4-byte length-prefixed) carry jpeg images to a float NCHW input."""
    client = triton.InferenceServerClient(server.target)
    images = np.array([jpeg(256, 256)], dtype=np.object_)
    tensor = triton.InferInput("input", [1], "BYTES")
    tensor.set_data_from_numpy(images)
    got = client.infer("classifier", [tensor]).as_numpy("probabilities")
    batch = decode_like_ovms(images[0])[None]
    want = direct(repo / "classifier" / "1" / "model.xml", {"input": batch})["probabilities"]
    assert got is not None and np.allclose(got, want, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize(
    "version", ["\u00b2", "\u0661", "1\u00b2"], ids=["sup2", "arabic1", "1sup2"]
)
def test_versions_other_than_ascii_digits_are_invalid(channel: grpc.Channel, version: str) -> None:
    """A version of Unicode digits ("²", Arabic-Indic "١") is an invalid format, as any
    non-digit is: not an internal error, and not read as some other version number."""
    stub = grpc_predict_v2_pb2_grpc.GRPCInferenceServiceStub(channel)
    infer = pb.ModelInferRequest(model_name="scaler", model_version=version)
    infer.inputs.add(name="x", datatype="FP32", shape=[1, 4]).contents.fp32_contents.extend(
        [1, 2, 3, 4]
    )
    calls = [
        lambda: stub.ModelInfer(infer, timeout=10),
        lambda: stub.ModelReady(pb.ModelReadyRequest(name="scaler", version=version), timeout=10),
        lambda: stub.ModelMetadata(
            pb.ModelMetadataRequest(name="scaler", version=version), timeout=10
        ),
    ]
    for call in calls:
        with pytest.raises(grpc.RpcError) as caught:
            call()
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
        assert "Model version is invalid format" in str(caught.value.details())


def test_an_output_requested_twice_is_refused(channel: grpc.Channel) -> None:
    """As Triton answers: "output 'sum' already requested". Each repeat used to add a copy of
    the output to the reply: 20000 repeats in a 1 MB request made an 80 MB reply."""
    stub = grpc_predict_v2_pb2_grpc.GRPCInferenceServiceStub(channel)
    request = pb.ModelInferRequest(model_name="two_inputs")
    for name in ("a", "b"):
        request.inputs.add(name=name, datatype="FP32", shape=[1, 4])
        request.raw_input_contents.append(np.ones(4, np.float32).tobytes())
    for name in ("sum", "product", "sum"):
        request.outputs.add(name=name)
    with pytest.raises(grpc.RpcError) as caught:
        stub.ModelInfer(request, timeout=10)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == "output 'sum' already requested"
    del request.outputs[2]
    reply = stub.ModelInfer(request, timeout=10)
    assert [output.name for output in reply.outputs] == ["sum", "product"]


def test_stream_infer_is_unimplemented_without_an_error_log(
    channel: grpc.Channel, server: Server
) -> None:
    """ModelStreamInfer is not served: UNIMPLEMENTED, naming ModelInfer, and nothing in the
    server's log (a client's call is not a server error)."""
    stub = grpc_predict_v2_pb2_grpc.GRPCInferenceServiceStub(channel)
    request = pb.ModelInferRequest(model_name="scaler")
    logged = len(server.log.read_text())
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.ModelStreamInfer(iter([request]), timeout=10))
    assert caught.value.code() is grpc.StatusCode.UNIMPLEMENTED
    assert "use ModelInfer" in str(caught.value.details())
    assert "Traceback" not in server.log.read_text()[logged:]
