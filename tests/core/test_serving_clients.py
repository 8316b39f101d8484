"""The real client libraries users point at OVMS, pointed at our server: ovmsclient (TF Serving
REST) and tritonclient.http (KServe v2 REST, JSON and binary extension)."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as triton
from ovmsclient import make_http_client
from ovmsclient.tfs_compat.base.errors import InvalidInputError, ModelNotFoundError
from tritonclient.utils import InferenceServerException

from tests.core.helpers import RunningServer, Zoo, encode_image, image_input, reference


def _host(server: RunningServer) -> str:
    return f"127.0.0.1:{server.port}"


# -- ovmsclient --------------------------------------------------------------------------------


def test_ovmsclient_predict_classifier(zoo: Zoo, zoo_server: RunningServer) -> None:
    client = make_http_client(_host(zoo_server))
    batch = image_input(seed=11)
    got = client.predict({"input": batch}, "classifier")
    assert isinstance(got, np.ndarray)
    expected = reference(zoo.classifier, {"input": batch})["probabilities"]
    assert got.shape == (1, 1000)
    assert np.allclose(got, expected, rtol=1e-5)


def test_ovmsclient_predict_two_outputs(zoo_server: RunningServer) -> None:
    client = make_http_client(_host(zoo_server))
    a = np.array([[1, 2, 3, 4]], dtype=np.float32)
    b = np.array([[2, 2, 2, 2]], dtype=np.float32)
    got = client.predict({"a": a, "b": b}, "two_inputs", model_version=1)
    assert sorted(got) == ["product", "sum"]
    assert np.array_equal(got["sum"], a + b)
    assert np.array_equal(got["product"], a * b)


def test_ovmsclient_predict_image_bytes(zoo: Zoo, zoo_server: RunningServer) -> None:
    """ovmsclient sends a bytes value as [{"b64": ...}]: a png for an NHWC model."""
    pixels = np.random.default_rng(13).integers(0, 256, (224, 224, 3), dtype=np.uint8)
    client = make_http_client(_host(zoo_server))
    got = client.predict({"input": encode_image(pixels)}, "classifier_nhwc")
    bgr = pixels[None, :, :, ::-1].astype(np.float32)
    expected = reference(zoo.classifier_nhwc, {"input": bgr})["probabilities"]
    assert np.allclose(got, expected, rtol=1e-5)


def test_ovmsclient_metadata(zoo_server: RunningServer) -> None:
    client = make_http_client(_host(zoo_server))
    assert client.get_model_metadata("classifier_dyn") == {
        "model_version": 1,
        "inputs": {"input": {"shape": [-1, 3, 224, 224], "dtype": "DT_FLOAT"}},
        "outputs": {"probabilities": {"shape": [-1, 1000], "dtype": "DT_FLOAT"}},
    }


def test_ovmsclient_status(zoo_server: RunningServer) -> None:
    client = make_http_client(_host(zoo_server))
    assert client.get_model_status("scaler") == {
        1: {"state": "AVAILABLE", "error_code": 0, "error_message": "OK"}
    }


def test_ovmsclient_errors(zoo_server: RunningServer) -> None:
    client = make_http_client(_host(zoo_server))
    with pytest.raises(ModelNotFoundError, match="Model with requested name is not found"):
        client.predict({"x": np.ones((1, 4), np.float32)}, "no_such_model")
    with pytest.raises(ModelNotFoundError, match="Model with requested version is not found"):
        client.get_model_metadata("scaler", model_version=9)
    with pytest.raises(InvalidInputError, match="Invalid input shape"):
        client.predict({"x": np.ones((1, 5), np.float32)}, "scaler")
    got = client.predict({"x": np.ones((1, 4), np.float32)}, "scaler")
    assert np.array_equal(got, np.full((1, 4), 3.0, np.float32))


# -- tritonclient.http -------------------------------------------------------------------------


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_triton_infer_classifier(zoo: Zoo, zoo_server: RunningServer, binary: bool) -> None:
    client = triton.InferenceServerClient(_host(zoo_server))
    batch = image_input(seed=12, batch=2)
    tensor = triton.InferInput("input", list(batch.shape), "FP32")
    tensor.set_data_from_numpy(batch, binary_data=binary)
    result = client.infer(
        "classifier_dyn",
        [tensor],
        outputs=[triton.InferRequestedOutput("probabilities", binary_data=binary)],
    )
    got = result.as_numpy("probabilities")
    expected = reference(zoo.classifier_dyn, {"input": batch})["probabilities"]
    assert got.dtype == np.float32 and got.shape == (2, 1000)
    assert np.allclose(got, expected, rtol=1e-5)
    assert result.get_response()["model_name"] == "classifier_dyn"


@pytest.mark.parametrize("binary_in", [True, False])
@pytest.mark.parametrize("binary_out", [True, False])
def test_triton_infer_two_outputs(
    zoo_server: RunningServer, binary_in: bool, binary_out: bool
) -> None:
    client = triton.InferenceServerClient(_host(zoo_server))
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.full((2, 4), 0.5, dtype=np.float32)
    inputs = [triton.InferInput("a", [2, 4], "FP32"), triton.InferInput("b", [2, 4], "FP32")]
    inputs[0].set_data_from_numpy(a, binary_data=binary_in)
    inputs[1].set_data_from_numpy(b, binary_data=binary_in)
    outputs = [
        triton.InferRequestedOutput("sum", binary_data=binary_out),
        triton.InferRequestedOutput("product", binary_data=binary_out),
    ]
    result = client.infer("two_inputs", inputs, model_version="1", outputs=outputs)
    assert np.array_equal(result.as_numpy("sum"), a + b)
    assert np.array_equal(result.as_numpy("product"), a * b)


def test_triton_metadata_and_health(zoo_server: RunningServer) -> None:
    client = triton.InferenceServerClient(_host(zoo_server))
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("scaler")
    assert client.is_model_ready("scaler", "1")
    assert not client.is_model_ready("scaler", "2")
    assert not client.is_model_ready("no_such_model")
    assert client.get_model_metadata("two_inputs") == {
        "name": "two_inputs",
        "versions": ["1"],
        "platform": "OpenVINO",
        "inputs": [
            {"name": "a", "datatype": "FP32", "shape": [-1, 4]},
            {"name": "b", "datatype": "FP32", "shape": [-1, 4]},
        ],
        # sorted by name as OVMS lists them (its tensor maps are ordered), not in the
        # model's order (sum, product): a client indexing outputs[0] reads the same tensor
        "outputs": [
            {"name": "product", "datatype": "FP32", "shape": [-1, 4]},
            {"name": "sum", "datatype": "FP32", "shape": [-1, 4]},
        ],
    }
    assert client.get_server_metadata()["name"] == "OpenVINO Model Server"


def test_triton_errors(zoo_server: RunningServer) -> None:
    client = triton.InferenceServerClient(_host(zoo_server))
    tensor = triton.InferInput("x", [1, 4], "INT64")
    tensor.set_data_from_numpy(np.ones((1, 4), np.int64))
    with pytest.raises(InferenceServerException, match="Invalid input precision"):
        client.infer("scaler", [tensor])
    with pytest.raises(InferenceServerException, match="Model with requested name is not found"):
        client.get_model_metadata("no_such_model")
    good = triton.InferInput("x", [1, 4], "FP32")
    good.set_data_from_numpy(np.ones((1, 4), np.float32))
    assert np.array_equal(
        client.infer("scaler", [good]).as_numpy("y"), np.full((1, 4), 3.0, np.float32)
    )
