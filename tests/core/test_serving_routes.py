"""Every REST route against a real server: TF Serving /v1 (predict in the four body formats,
status, metadata) and KServe v2 /v2 (health, server/model metadata, ready, infer in JSON and in
the binary extension, both directions). Numbers are checked against OpenVINO itself."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import requests

from tests.core.helpers import (
    RunningServer,
    Zoo,
    error_of,
    image_input,
    kserve_binary_request,
    reference,
    split_binary_response,
)

CLASSIFIERS = ["classifier", "classifier_dyn", "classifier_onnx"]
FORMATS = ["row_named", "row_unnamed", "column_named", "column_unnamed"]


def tfs_body(form: str, name: str, batch: np.ndarray) -> dict[str, Any]:
    """One request in each of the four TFS REST body formats OVMS's tests use."""
    if form == "row_named":
        return {"instances": [{name: item.tolist()} for item in batch]}
    if form == "row_unnamed":
        return {"instances": batch.tolist()}
    if form == "column_named":
        return {"inputs": {name: batch.tolist()}}
    return {"inputs": batch.tolist()}


def model_of(zoo: Zoo, name: str) -> Any:
    return getattr(zoo, name)


# -- health and server metadata ----------------------------------------------------------------


def test_health_live_and_ready(zoo_server: RunningServer) -> None:
    assert zoo_server.get("/v2/health/live").status_code == 200
    assert zoo_server.get("/v2/health/ready").status_code == 200


def test_server_metadata(zoo_server: RunningServer) -> None:
    response = zoo_server.get("/v2")
    assert response.status_code == 200
    doc = response.json()
    assert doc["name"] == "OpenVINO Model Server"
    assert isinstance(doc["version"], str) and doc["version"]
    assert zoo_server.get("/v2/").json() == doc


# -- TFS predict -------------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMATS)
@pytest.mark.parametrize("name", CLASSIFIERS)
def test_tfs_predict_classifier_numbers(
    zoo: Zoo, zoo_server: RunningServer, name: str, form: str
) -> None:
    batch = image_input(seed=1, batch=2 if name == "classifier_dyn" else 1)
    response = zoo_server.post(f"/v1/models/{name}:predict", tfs_body(form, "input", batch))
    assert response.status_code == 200, response.text
    doc = response.json()
    key = "predictions" if form.startswith("row") else "outputs"
    assert list(doc) == [key]
    got = np.asarray(doc[key], dtype=np.float32)
    expected = reference(model_of(zoo, name), {"input": batch})["probabilities"]
    assert got.shape == expected.shape == (len(batch), 1000)
    assert np.allclose(got, expected, rtol=1e-5)


def test_onnx_and_ir_classifiers_agree(zoo: Zoo) -> None:
    """The ONNX file is the same network with the same weights, so both answer the same."""
    batch = image_input(seed=2)
    from_onnx = reference(zoo.classifier_onnx, {"input": batch})["probabilities"]
    from_ir = reference(zoo.classifier, {"input": batch})["probabilities"]
    assert np.allclose(from_onnx, from_ir, rtol=1e-5, atol=1e-7)


def test_tfs_predict_with_version_and_label_paths(zoo_server: RunningServer) -> None:
    body = {"instances": [[1, 2, 3, 4]]}
    for path in (
        "/v1/models/scaler/versions/1:predict",
        "/v1/models/scaler/versions/0:predict",
        "/v1/models/scaler/labels/stable:predict",
    ):
        response = zoo_server.post(path, body)
        assert response.status_code == 200, (path, response.text)
        assert response.json() == {"predictions": [[3.0, 6.0, 9.0, 12.0]]}


def test_tfs_two_outputs_row_named(zoo_server: RunningServer) -> None:
    body = {
        "instances": [
            {"a": [1, 2, 3, 4], "b": [5, 6, 7, 8]},
            {"a": [0, 1, 0, 1], "b": [2, 2, 2, 2]},
        ]
    }
    response = zoo_server.post("/v1/models/two_inputs:predict", body)
    assert response.status_code == 200, response.text
    assert response.json() == {
        "predictions": [
            {"sum": [6.0, 8.0, 10.0, 12.0], "product": [5.0, 12.0, 21.0, 32.0]},
            {"sum": [2.0, 3.0, 2.0, 3.0], "product": [0.0, 2.0, 0.0, 2.0]},
        ]
    }


def test_tfs_two_outputs_column_named(zoo_server: RunningServer) -> None:
    body = {"inputs": {"a": [[1, 2, 3, 4]], "b": [[5, 6, 7, 8]]}}
    response = zoo_server.post("/v1/models/two_inputs:predict", body)
    assert response.status_code == 200, response.text
    assert response.json() == {
        "outputs": {"sum": [[6.0, 8.0, 10.0, 12.0]], "product": [[5.0, 12.0, 21.0, 32.0]]}
    }


@pytest.mark.parametrize("body", [{"instances": [[1, 2, 3, 4]]}, {"inputs": [[1, 2, 3, 4]]}])
def test_tfs_unnamed_formats_need_a_single_input_model(
    zoo_server: RunningServer, body: dict[str, Any]
) -> None:
    response = zoo_server.post("/v1/models/two_inputs:predict", body)
    assert response.status_code == 400
    assert error_of(response).startswith("Inputs inside buffer does not match expected format")


# -- TFS status and metadata -------------------------------------------------------------------

AVAILABLE = {
    "version": "1",
    "state": "AVAILABLE",
    "status": {"error_code": "OK", "error_message": "OK"},
}


@pytest.mark.parametrize(
    "path", ["/v1/models/scaler", "/v1/models/scaler/versions/1", "/v1/models/scaler/versions/0"]
)
def test_tfs_status(zoo_server: RunningServer, path: str) -> None:
    response = zoo_server.get(path)
    assert response.status_code == 200, response.text
    assert response.json() == {"model_version_status": [AVAILABLE]}


def test_config_lists_every_model(zoo: Zoo, zoo_server: RunningServer) -> None:
    doc = zoo_server.get("/v1/config").json()
    assert sorted(doc) == sorted(
        [
            "classifier",
            "classifier_dyn",
            "classifier_nhwc",
            "classifier_onnx",
            "two_inputs",
            "scaler",
        ]
    )
    assert all(entry == {"model_version_status": [AVAILABLE]} for entry in doc.values())


def _tfs_tensor(name: str, dims: list[int]) -> dict[str, Any]:
    return {
        "dtype": "DT_FLOAT",
        "tensorShape": {"dim": [{"size": str(d), "name": ""} for d in dims], "unknownRank": False},
        "name": name,
    }


def _tfs_metadata(
    name: str, inputs: dict[str, list[int]], outputs: dict[str, list[int]]
) -> dict[str, Any]:
    return {
        "modelSpec": {"name": name, "signatureName": "", "version": "1"},
        "metadata": {
            "signature_def": {
                "@type": "type.googleapis.com/tensorflow.serving.SignatureDefMap",
                "signatureDef": {
                    "serving_default": {
                        "inputs": {n: _tfs_tensor(n, d) for n, d in inputs.items()},
                        "outputs": {n: _tfs_tensor(n, d) for n, d in outputs.items()},
                        "methodName": "",
                        "defaults": {},
                    }
                },
            }
        },
    }


METADATA = {
    "classifier": ({"input": [1, 3, 224, 224]}, {"probabilities": [1, 1000]}),
    "classifier_dyn": ({"input": [-1, 3, 224, 224]}, {"probabilities": [-1, 1000]}),
    "classifier_nhwc": ({"input": [-1, 224, 224, 3]}, {"probabilities": [-1, 1000]}),
    "classifier_onnx": ({"input": [1, 3, 224, 224]}, {"probabilities": [1, 1000]}),
    "two_inputs": ({"a": [-1, 4], "b": [-1, 4]}, {"sum": [-1, 4], "product": [-1, 4]}),
    "scaler": ({"x": [-1, 4]}, {"y": [-1, 4]}),
}


@pytest.mark.parametrize("name", sorted(METADATA))
def test_tfs_metadata(zoo_server: RunningServer, name: str) -> None:
    inputs, outputs = METADATA[name]
    for path in (f"/v1/models/{name}/metadata", f"/v1/models/{name}/versions/1/metadata"):
        response = zoo_server.get(path)
        assert response.status_code == 200, response.text
        assert response.json() == _tfs_metadata(name, inputs, outputs)


# -- KServe metadata, ready --------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(METADATA))
def test_kserve_model_metadata(zoo_server: RunningServer, name: str) -> None:
    inputs, outputs = METADATA[name]
    expected = {
        "name": name,
        "versions": ["1"],
        "platform": "OpenVINO",
        # listed by name, as OVMS lists them
        "inputs": [{"name": n, "datatype": "FP32", "shape": d} for n, d in sorted(inputs.items())],
        "outputs": [
            {"name": n, "datatype": "FP32", "shape": d} for n, d in sorted(outputs.items())
        ],
    }
    for path in (f"/v2/models/{name}", f"/v2/models/{name}/versions/1"):
        response = zoo_server.get(path)
        assert response.status_code == 200, response.text
        assert response.json() == expected


def test_kserve_model_ready(zoo_server: RunningServer) -> None:
    assert zoo_server.get("/v2/models/scaler/ready").status_code == 200
    assert zoo_server.get("/v2/models/scaler/versions/1/ready").status_code == 200
    assert zoo_server.get("/v2/models/scaler/versions/2/ready").status_code == 404
    assert zoo_server.get("/v2/models/nope/ready").status_code == 404


# -- KServe infer ------------------------------------------------------------------------------


def _kserve_input(name: str, array: np.ndarray, **extra: Any) -> dict[str, Any]:
    return {"name": name, "shape": list(array.shape), "datatype": "FP32", **extra}


@pytest.mark.parametrize("name", CLASSIFIERS)
def test_kserve_infer_json(zoo: Zoo, zoo_server: RunningServer, name: str) -> None:
    batch = image_input(seed=3, batch=2 if name == "classifier_dyn" else 1)
    body = {
        "id": "req-7",
        "inputs": [_kserve_input("input", batch, data=batch.reshape(-1).tolist())],
    }
    response = zoo_server.post(f"/v2/models/{name}/infer", body)
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    doc = response.json()
    assert {k: v for k, v in doc.items() if k != "outputs"} == {
        "model_name": name,
        "model_version": "1",
        "id": "req-7",
    }
    (output,) = doc["outputs"]
    assert {k: v for k, v in output.items() if k != "data"} == {
        "name": "probabilities",
        "datatype": "FP32",
        "shape": [len(batch), 1000],
    }
    got = np.asarray(output["data"], dtype=np.float32).reshape(len(batch), 1000)
    expected = reference(model_of(zoo, name), {"input": batch})["probabilities"]
    assert np.allclose(got, expected, rtol=1e-5)


def test_kserve_infer_nested_data_is_accepted(zoo_server: RunningServer) -> None:
    data = [[1.0, 2.0, 3.0, 4.0], [0.5, 0.0, -1.0, 2.0]]
    body = {"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": data}]}
    response = zoo_server.post("/v2/models/scaler/infer", body)
    assert response.status_code == 200, response.text
    assert response.json()["outputs"][0]["data"] == [3.0, 6.0, 9.0, 12.0, 1.5, 0.0, -3.0, 6.0]


def test_kserve_binary_output(zoo: Zoo, zoo_server: RunningServer) -> None:
    batch = image_input(seed=4)
    body = {
        "inputs": [_kserve_input("input", batch, data=batch.reshape(-1).tolist())],
        "parameters": {"binary_data_output": True},
    }
    response = zoo_server.post("/v2/models/classifier/infer", body)
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"] == "application/octet-stream"
    header, payload = split_binary_response(response)
    (output,) = header["outputs"]
    assert output == {
        "name": "probabilities",
        "datatype": "FP32",
        "shape": [1, 1000],
        "parameters": {"binary_data_size": 4000},
    }
    got = np.frombuffer(payload, dtype=np.float32).reshape(1, 1000)
    expected = reference(zoo.classifier, {"input": batch})["probabilities"]
    assert np.allclose(got, expected, rtol=1e-5)


def test_kserve_binary_input(zoo: Zoo, zoo_server: RunningServer) -> None:
    batch = image_input(seed=5, batch=3)
    doc = {"inputs": [_kserve_input("input", batch, parameters={"binary_data_size": batch.nbytes})]}
    data, headers = kserve_binary_request(doc, batch.tobytes())
    response = zoo_server.post("/v2/models/classifier_dyn/infer", data=data, headers=headers)
    assert response.status_code == 200, response.text
    (output,) = response.json()["outputs"]
    got = np.asarray(output["data"], dtype=np.float32).reshape(3, 1000)
    expected = reference(zoo.classifier_dyn, {"input": batch})["probabilities"]
    assert np.allclose(got, expected, rtol=1e-5)


def test_kserve_binary_both_ways_and_per_output_choice(zoo_server: RunningServer) -> None:
    a = np.array([[1, 2, 3, 4]], dtype=np.float32)
    b = np.array([[5, 6, 7, 8]], dtype=np.float32)
    doc = {
        "inputs": [
            _kserve_input("a", a, parameters={"binary_data_size": a.nbytes}),
            _kserve_input("b", b, data=b.reshape(-1).tolist()),
        ],
        "outputs": [
            {"name": "product", "parameters": {"binary_data": True}},
            {"name": "sum", "parameters": {"binary_data": False}},
        ],
    }
    data, headers = kserve_binary_request(doc, a.tobytes())
    response = zoo_server.post("/v2/models/two_inputs/infer", data=data, headers=headers)
    assert response.status_code == 200, response.text
    header, payload = split_binary_response(response)
    by_name = {o["name"]: o for o in header["outputs"]}
    assert by_name["sum"]["data"] == [6.0, 8.0, 10.0, 12.0]
    assert by_name["product"]["parameters"] == {"binary_data_size": 16}
    assert np.frombuffer(payload, dtype=np.float32).tolist() == [5.0, 12.0, 21.0, 32.0]


def test_kserve_requested_outputs_subset(zoo_server: RunningServer) -> None:
    body = {
        "inputs": [
            {"name": "a", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]},
            {"name": "b", "shape": [1, 4], "datatype": "FP32", "data": [1, 1, 1, 1]},
        ],
        "outputs": [{"name": "sum"}],
    }
    response = zoo_server.post("/v2/models/two_inputs/infer", body)
    assert response.status_code == 200, response.text
    assert response.json()["outputs"] == [
        {"name": "sum", "datatype": "FP32", "shape": [1, 4], "data": [2.0, 3.0, 4.0, 5.0]}
    ]


def test_signature_name_is_accepted_and_ignored(zoo_server: RunningServer) -> None:
    body = {"signature_name": "serving_default", "instances": [[1, 2, 3, 4]]}
    response = zoo_server.post("/v1/models/scaler:predict", body)
    assert response.status_code == 200, response.text
    assert response.json() == {"predictions": [[3.0, 6.0, 9.0, 12.0]]}


def test_concurrent_requests_each_get_their_own_answer(zoo: Zoo, zoo_server: RunningServer) -> None:
    """Requests overlap on the model's infer-request pool; no answer may leak into another."""
    batches = [image_input(seed=100 + i, batch=1 + i % 3) for i in range(12)]

    def call(batch: np.ndarray) -> np.ndarray:
        response = requests.post(
            f"{zoo_server.url}/v1/models/classifier_dyn:predict",
            json={"inputs": batch.tolist()},
            timeout=120,
        )
        assert response.status_code == 200, response.text
        return np.asarray(response.json()["outputs"], dtype=np.float32)

    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(pool.map(call, batches))
    for batch, got in zip(batches, answers, strict=True):
        expected = reference(zoo.classifier_dyn, {"input": batch})["probabilities"]
        assert np.allclose(got, expected, rtol=1e-5)


def test_the_openai_wire_loads_with_the_first_openai_call_not_at_start() -> None:
    import json
    import subprocess
    import sys
    from pathlib import Path

    probe = (
        "import json, sys\n"
        "from core.api import App, make_request\n"
        "from core.config import Settings\n"
        "from core.serving.registry import ModelManager\n"
        "app = App(ModelManager(Settings()), Settings())\n"
        "before = 'core.codecs.openai' in sys.modules\n"
        "answer = app.handle(make_request('GET', '/v3/models', b''))\n"
        "print(json.dumps([before, 'core.codecs.openai' in sys.modules, answer.status]))\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == [False, True, 200]
