"""handlers.cloud_run under the REAL functions-framework CLI, called by the real clients
(ovmsclient for the TF Serving API, tritonclient for KServe v2), checked against OpenVINO."""

from __future__ import annotations

from collections.abc import Callable

import functions_framework
import numpy as np
import orjson
import ovmsclient
import pytest
import tritonclient.http as triton

import core.logs
from tests.handlers.conftest import ROOT

RTOL, ATOL = 1e-5, 1e-6


def test_ovmsclient(servers: dict[str, str], tensor: np.ndarray,
                    reference: Callable[[np.ndarray], np.ndarray]) -> None:
    client = ovmsclient.make_http_client(servers["cloud_run"].removeprefix("http://"))
    status = client.get_model_status("classifier")
    assert status[1]["state"] == "AVAILABLE"
    metadata = client.get_model_metadata("classifier")
    assert metadata["inputs"]["input"]["shape"] == [-1, 3, 224, 224]
    assert metadata["outputs"]["probabilities"]["dtype"] == "DT_FLOAT"
    got = client.predict({"input": tensor}, "classifier")
    np.testing.assert_allclose(got, reference(tensor), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("binary", [False, True])
def test_tritonclient(servers: dict[str, str], tensor: np.ndarray, binary: bool,
                      reference: Callable[[np.ndarray], np.ndarray]) -> None:
    client = triton.InferenceServerClient(servers["cloud_run"].removeprefix("http://"))
    assert client.is_server_ready() and client.is_model_ready("classifier")
    data = triton.InferInput("input", list(tensor.shape), "FP32")
    data.set_data_from_numpy(tensor, binary_data=binary)
    wanted = triton.InferRequestedOutput("probabilities", binary_data=binary)
    result = client.infer("classifier", [data], outputs=[wanted])
    np.testing.assert_allclose(result.as_numpy("probabilities"), reference(tensor),
                               rtol=RTOL, atol=ATOL)


def test_limits_and_errors_with_the_test_client(serving_env: pytest.MonkeyPatch) -> None:
    serving_env.setenv("OVS_MAX_REQUEST_BYTES", "1000")
    client = functions_framework.create_app(
        "predict", str(ROOT / "handlers" / "cloud_run.py")).test_client()
    reply = client.post("/v1/models/scaler:predict", data=b"x" * 2000)
    assert reply.status_code == 413
    assert "exceeds the limit of 1000 bytes" in orjson.loads(reply.data)["error"]
    reply = client.get("/v3/nothing")
    assert reply.status_code == 404 and reply.json == {"error": "Invalid request URL: /v3/nothing"}
    reply = client.post("/v1/models/scaler:predict", json={"instances": [[1, 2, 3, 4]]},
                        headers={"X-Cloud-Trace-Context": "105445aa7843bc8bf206b1200/1;o=1"})
    assert reply.status_code == 200 and reply.json == {"predictions": [[2.0, 4.0, 6.0, 8.0]]}
    assert core.logs.request_id.get() == "105445aa7843bc8bf206b1200"
