"""Every way a request can be wrong, with the status and the OVMS message a client sees; after
each failure the same server still answers a good request."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from core.api import App, make_request
from core.config import Settings
from core.serving.registry import ModelManager
from tests.core.helpers import RunningServer, Zoo, kserve_binary_request


@dataclass(frozen=True)
class Case:
    id: str
    method: str
    path: str
    status: int
    message: str  # the error text starts with this ("" = body not checked)
    body: Any = None  # a JSON document, or raw bytes
    headers: dict[str, str] = field(default_factory=dict)


def kserve(name: str, shape: list[int], datatype: str, data: Any) -> dict[str, Any]:
    return {"inputs": [{"name": name, "shape": shape, "datatype": datatype, "data": data}]}


X = [[1.0, 2.0, 3.0, 4.0]]
NAME_404 = "Model with requested name is not found"
VERSION_404 = "Model with requested version is not found"
HEADER_ONLY = (
    b'{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32",'
    b'"parameters":{"binary_data_size":16}}]}'
)
BOTH = (
    b'{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4],'
    b'"parameters":{"binary_data_size":16}}]}'
)

CASES = [
    # unknown model / version, on every route that names one
    Case(
        "predict-unknown-model", "POST", "/v1/models/nope:predict", 404, NAME_404, {"instances": X}
    ),
    Case("status-unknown-model", "GET", "/v1/models/nope", 404, NAME_404),
    Case("metadata-unknown-model", "GET", "/v1/models/nope/metadata", 404, NAME_404),
    Case("kserve-metadata-unknown-model", "GET", "/v2/models/nope", 404, NAME_404),
    Case(
        "kserve-infer-unknown-model",
        "POST",
        "/v2/models/nope/infer",
        404,
        NAME_404,
        kserve("x", [1, 4], "FP32", X),
    ),
    Case("kserve-ready-unknown-model", "GET", "/v2/models/nope/ready", 404, ""),
    Case(
        "predict-unknown-version",
        "POST",
        "/v1/models/scaler/versions/7:predict",
        404,
        VERSION_404,
        {"instances": X},
    ),
    Case("status-unknown-version", "GET", "/v1/models/scaler/versions/7", 404, VERSION_404),
    Case(
        "metadata-unknown-version", "GET", "/v1/models/scaler/versions/7/metadata", 404, VERSION_404
    ),
    Case(
        "kserve-infer-unknown-version",
        "POST",
        "/v2/models/scaler/versions/7/infer",
        404,
        VERSION_404,
        kserve("x", [1, 4], "FP32", X),
    ),
    # inputs: names, count, precision, shape, batch
    Case(
        "missing-input-name",
        "POST",
        "/v1/models/scaler:predict",
        400,
        "Missing input with specific name - Required input: x",
        {"inputs": {"z": X}},
    ),
    Case(
        "kserve-missing-input-name",
        "POST",
        "/v2/models/scaler/infer",
        400,
        "Missing input with specific name - Required input: x",
        kserve("z", [1, 4], "FP32", X),
    ),
    Case(
        "too-few-inputs",
        "POST",
        "/v1/models/two_inputs:predict",
        400,
        "Invalid number of inputs - Expected: 2; Actual: 1",
        {"inputs": {"a": X}},
    ),
    Case(
        "too-many-inputs",
        "POST",
        "/v1/models/scaler:predict",
        400,
        "Invalid number of inputs - Expected: 1; Actual: 2",
        {"instances": [{"x": X[0], "y": X[0]}]},
    ),
    Case(
        "kserve-no-inputs",
        "POST",
        "/v2/models/scaler/infer",
        400,
        "Invalid number of inputs - Expected: 1; Actual: 0",
        {"inputs": []},
    ),
    Case(
        "kserve-int64-to-fp32",
        "POST",
        "/v2/models/scaler/infer",
        400,
        "Invalid input precision - Expected: FP32; Actual: I64",
        kserve("x", [1, 4], "INT64", [1, 2, 3, 4]),
    ),
    Case(
        "kserve-uint8-to-fp32",
        "POST",
        "/v2/models/scaler/infer",
        400,
        "Invalid input precision - Expected: FP32; Actual: U8",
        kserve("x", [1, 4], "UINT8", [1, 2, 3, 4]),
    ),
    Case(
        "kserve-unknown-datatype",
        "POST",
        "/v2/models/scaler/infer",
        400,
        "Unsupported datatype",
        kserve("x", [1, 4], "FP99", [1, 2, 3, 4]),
    ),
    Case(
        "wrong-shape",
        "POST",
        "/v1/models/scaler:predict",
        400,
        "Invalid input shape - Expected: (-1,4); Actual: (1,3); input name: x",
        {"instances": [[1, 2, 3]]},
    ),
    Case(
        "kserve-wrong-shape",
        "POST",
        "/v2/models/classifier/infer",
        400,
        "Invalid input shape - Expected: (1,3,224,224); Actual: (1,3,2,2); input name: input",
        kserve("input", [1, 3, 2, 2], "FP32", [0.0] * 12),
    ),
    Case(
        "wrong-rank",
        "POST",
        "/v1/models/scaler:predict",
        400,
        "Invalid number of shape dimensions - Expected: (-1,4); Actual: (4)",
        {"inputs": [1, 2, 3, 4]},
    ),
    Case(
        "wrong-batch",
        "POST",
        "/v1/models/classifier:predict",
        400,
        "Invalid input batch size - Expected: 1; Actual: 2; input name: input",
        {"inputs": [[[[0.0] * 224] * 224] * 3] * 2},
    ),
    Case(
        "kserve-value-count",
        "POST",
        "/v2/models/scaler/infer",
        400,
        "Invalid number of values in tensor proto container - Expected: 4; Actual: 3",
        kserve("x", [1, 4], "FP32", [1, 2, 3]),
    ),
    # TFS body structure
    Case(
        "ragged-row",
        "POST",
        "/v1/models/scaler:predict",
        400,
        "Could not parse instance content. Not valid ndarray detected",
        {"instances": [[1, 2, 3, 4], [1, 2]]},
    ),
    Case(
        "ragged-column",
        "POST",
        "/v1/models/scaler:predict",
        400,
        "Could not parse input content. Not valid ndarray detected",
        {"inputs": {"x": [[1, 2, 3, 4], [1, 2]]}},
    ),
    Case(
        "non-numbers",
        "POST",
        "/v1/models/scaler:predict",
        400,
        "Could not parse instance content. Not valid ndarray detected",
        {"instances": [[1, None, 3, 4]]},
    ),
    Case(
        "empty-instances",
        "POST",
        "/v1/models/scaler:predict",
        400,
        "Invalid JSON structure. Missing instances in row format",
        {"instances": []},
    ),
    Case(
        "instances-and-inputs",
        "POST",
        "/v1/models/scaler:predict",
        400,
        "Invalid JSON structure. Could not detect row or column format",
        {"instances": X, "inputs": X},
    ),
    Case(
        "neither-instances-nor-inputs",
        "POST",
        "/v1/models/scaler:predict",
        400,
        "Invalid JSON structure. Could not detect row or column format",
        {"signature_name": "serving_default"},
    ),
    Case(
        "body-not-an-object",
        "POST",
        "/v1/models/scaler:predict",
        400,
        "Invalid JSON structure. Could not detect row or column format",
        [1, 2],
    ),
    Case(
        "unnamed-to-two-inputs",
        "POST",
        "/v1/models/two_inputs:predict",
        400,
        "Inputs inside buffer does not match expected format",
        {"instances": X},
    ),
    Case(
        "malformed-json",
        "POST",
        "/v1/models/scaler:predict",
        412,
        "The file is not valid json",
        b'{"instances": [[1, 2, 3, 4]}',
    ),
    Case("empty-body", "POST", "/v1/models/scaler:predict", 412, "The file is not valid json", b""),
    Case(
        "kserve-malformed-json",
        "POST",
        "/v2/models/scaler/infer",
        412,
        "The file is not valid json",
        b'{"inputs": [',
    ),
    # KServe binary extension
    Case(
        "bad-header-length",
        "POST",
        "/v2/models/scaler/infer",
        400,
        "Inference-Header-Content-Length header is invalid and couldn't be parsed",
        HEADER_ONLY + b"\x00" * 16,
        {"Inference-Header-Content-Length": "abc"},
    ),
    Case(
        "header-length-past-the-body",
        "POST",
        "/v2/models/scaler/infer",
        400,
        "Inference-Header-Content-Length header is invalid and couldn't be parsed",
        HEADER_ONLY,
        {"Inference-Header-Content-Length": str(len(HEADER_ONLY) + 1)},
    ),
    Case(
        "binary-shorter-than-declared",
        "POST",
        "/v2/models/scaler/infer",
        400,
        "Received buffer size is smaller than binary_data_size parameter indicates",
        HEADER_ONLY + b"\x00" * 8,
        {"Inference-Header-Content-Length": str(len(HEADER_ONLY))},
    ),
    Case(
        "binary-and-data",
        "POST",
        "/v2/models/scaler/infer",
        400,
        "Request contains values both in binary data and in content value",
        BOTH + b"\x00" * 16,
        {"Inference-Header-Content-Length": str(len(BOTH))},
    ),
    Case(
        "unknown-requested-output",
        "POST",
        "/v2/models/scaler/infer",
        400,
        "Requested output is not served by the model",
        {**kserve("x", [1, 4], "FP32", X), "outputs": [{"name": "nope"}]},
    ),
    # URLs and methods
    Case("unknown-route", "GET", "/v1/nothing/here", 404, "Invalid request URL"),
    Case("unknown-v2-route", "GET", "/v2/models/scaler/versions/abc", 404, "Invalid request URL"),
    Case("classify-verb", "POST", "/v1/models/scaler:classify", 404, "", {"instances": X}),
    Case("get-predict", "GET", "/v1/models/scaler:predict", 405, "Unsupported method"),
    Case("get-infer", "GET", "/v2/models/scaler/infer", 405, "Unsupported method"),
    Case("post-ready", "POST", "/v2/models/scaler/ready", 405, "Unsupported method"),
    Case("delete-status", "DELETE", "/v1/models/scaler", 405, "Unsupported method"),
    Case("dot-dot", "GET", "/v1/models/scaler/../classifier", 400, "Invalid request URL"),
    Case("encoded-dot-dot", "GET", "/v1/models/%2e%2e/scaler", 400, "Invalid request URL"),
]


def send(server: RunningServer, case: Case) -> requests.Response:
    kwargs: dict[str, Any] = {"headers": case.headers}
    if isinstance(case.body, bytes):
        kwargs["data"] = case.body
    elif case.body is not None:
        kwargs["data"] = json.dumps(case.body)
    if case.path.count("..") or "%2e" in case.path:
        # requests would normalise the path; send it as written, like a hostile client does
        prepared = requests.Request(case.method, server.url + "/x", **kwargs).prepare()
        prepared.url = server.url + case.path
        return server.session.send(prepared, timeout=60)
    return server.request(case.method, case.path, **kwargs)


def assert_still_serving(server: RunningServer) -> None:
    response = server.post("/v1/models/scaler:predict", {"instances": X})
    assert response.status_code == 200, response.text
    assert response.json() == {"predictions": [[3.0, 6.0, 9.0, 12.0]]}
    response = server.post("/v2/models/scaler/infer", kserve("x", [1, 4], "FP32", X))
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_request(zoo_server: RunningServer, case: Case) -> None:
    response = send(zoo_server, case)
    assert response.status_code == case.status, response.text
    if case.message:
        doc = response.json()
        assert set(doc) == {"error"}, doc
        assert doc["error"].startswith(case.message), doc["error"]
    assert_still_serving(zoo_server)


def test_binary_input_size_follows_from_shape_when_not_declared(zoo_server: RunningServer) -> None:
    doc = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32"}]}
    data, headers = kserve_binary_request(doc, b"\x00\x00\x80\x3f" * 4)  # four 1.0f
    response = zoo_server.post("/v2/models/scaler/infer", data=data, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["outputs"][0]["data"] == [3.0, 3.0, 3.0, 3.0]


# -- request size limit ------------------------------------------------------------------------


def test_oversized_body_is_413_in_process(zoo: Zoo, tmp_path: Path) -> None:
    settings = Settings(
        config_path=str(zoo.config), cache_dir=str(tmp_path / "cache"), max_request_bytes=200
    )
    app = App(ModelManager.start(settings), settings)
    big = json.dumps({"instances": [[1.0, 2.0, 3.0, 4.0]] * 20}).encode()
    response = app.handle(make_request("POST", "/v1/models/scaler:predict", big))
    assert response.status == 413
    assert json.loads(response.body)["error"].startswith("Request body of")
    small = json.dumps({"instances": X}).encode()
    response = app.handle(make_request("POST", "/v1/models/scaler:predict", small))
    assert response.status == 200
    assert json.loads(response.body) == {"predictions": [[3.0, 6.0, 9.0, 12.0]]}


def test_oversized_body_is_413_over_http(zoo: Zoo, server_factory: Any) -> None:
    server = server_factory(zoo.config, "--max_request_bytes", "4096")
    big = json.dumps({"instances": [[1.0, 2.0, 3.0, 4.0]] * 400})
    response = server.post("/v1/models/scaler:predict", data=big)
    assert response.status_code == 413
    assert response.json()["error"].startswith("Request body of")
    assert_still_serving(server)
