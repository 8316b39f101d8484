"""Fixtures for the platform handlers: a real model repository, OVS_* env, real sample events,
the same requests for every transport, and direct-OpenVINO reference numbers.

Events come from tests/events/ (powertools and sam-cli samples, unmodified on disk);
`load_event` derives a per-test event by editing only method, path, body and added headers.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import orjson
import pytest
import requests
from PIL import Image

import core.api
from demo.models import classifier, save, scaler, two_inputs

EVENTS = Path(__file__).parents[1] / "events"
ROOT = Path(__file__).parents[2]
BIN = Path(sys.executable).parent
CONFIG = {
    "model_config_list": [
        {"config": {"name": "classifier", "base_path": "classifier"}},
        {"config": {"name": "two_inputs", "base_path": "two_inputs"}},
        {"config": {"name": "scaler", "base_path": "scaler"}},
    ]
}


@dataclass(frozen=True)
class Repo:
    config: Path
    cache: Path
    classifier_xml: Path

    def env(self) -> dict[str, str]:
        return {"OVS_CONFIG_PATH": str(self.config), "OVS_CACHE_DIR": str(self.cache)}


@pytest.fixture(scope="session")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    root = tmp_path_factory.mktemp("models")
    xml = save(classifier(seed=0, batch=None), root / "classifier" / "1")
    save(two_inputs(), root / "two_inputs" / "1")
    save(scaler(2.0), root / "scaler" / "1")
    (root / "config.json").write_text(json.dumps(CONFIG))
    return Repo(root / "config.json", root / "cache", xml)


_CLEARED = (
    "OVS_MODEL_NAME",
    "OVS_MODEL_PATH",
    "OVS_LAZY_LOAD",
    "OVS_MAX_REQUEST_BYTES",
    "OVS_BASE_PATH",
    "OVS_AZURE_AUTH_LEVEL",
    "AWS_LAMBDA_FUNCTION_NAME",
)


@pytest.fixture
def serving_env(repo: Repo, monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """OVS_* env for the repository and a fresh process-wide App (core.api._default_app)."""
    for key in _CLEARED:
        monkeypatch.delenv(key, raising=False)
    for key, value in repo.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(core.api, "_default_app", None)
    return monkeypatch


# -- events ------------------------------------------------------------------------------------


def load_event(
    name: str,
    path: str | None = None,
    body: bytes | str | None = None,
    base64: bool = False,
    method: str | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A sample event (`powertools/albEvent`) re-pointed at `path` with `body`."""
    event: dict[str, Any] = json.loads((EVENTS / f"{name}.json").read_text())
    context = event.setdefault("requestContext", {})
    stage = context.get("stage", "$default")
    prefix = "" if stage == "$default" else "/" + stage
    if event.get("version") == "2.0":
        if path is not None:
            event["rawPath"] = context["http"]["path"] = prefix + path
        if method is not None:
            context["http"]["method"] = method
    else:
        if path is not None:
            event["path"] = path
            if "elb" not in context:  # REST v1: requestContext.path carries the stage
                context["path"] = prefix + path
        if method is not None:
            event["httpMethod"] = method
            if "httpMethod" in context:
                context["httpMethod"] = method
    if body is not None:
        raw = body.encode() if isinstance(body, str) else body
        event["body"] = _b64(raw) if base64 else raw.decode()
        event["isBase64Encoded"] = base64
    for key, value in (headers or {}).items():
        if event.get("headers") is not None or "multiValueHeaders" not in event:
            event.setdefault("headers", {})[key] = value
        if event.get("multiValueHeaders") is not None:
            event["multiValueHeaders"][key] = [value]
    return event


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@dataclass
class LambdaContext:
    aws_request_id: str = "test-request-1"
    function_name: str = "ov-serverless-test"
    memory_limit_in_mb: int = 3008
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:ovs"


@dataclass
class AzureContext:
    """What the Functions worker passes as `context` (azure.functions.Context)."""

    invocation_id: str = "azure-invocation-1"
    function_name: str = "serve"
    function_directory: str = "/home/site/wwwroot"


def reply_body(reply: dict[str, Any]) -> bytes:
    body = reply.get("body") or ""
    return base64.b64decode(body) if reply.get("isBase64Encoded") else body.encode()


def reply_headers(reply: dict[str, Any]) -> dict[str, str]:
    if "headers" in reply:
        return {k.lower(): v for k, v in reply["headers"].items()}
    return {k.lower(): v[-1] for k, v in reply["multiValueHeaders"].items()}


# -- the same requests for every transport -----------------------------------------------------


@dataclass(frozen=True)
class Call:
    name: str
    method: str
    path: str
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    expected: np.ndarray | None = None  # reference numbers from direct OpenVINO


def outputs(call: Call, status: int, headers: dict[str, str], body: bytes) -> np.ndarray:
    """The probabilities from any of the four response formats."""
    assert status == 200, (call.name, status, body[:300])
    headers = {k.lower(): v for k, v in headers.items()}
    if call.path.startswith("/v1/"):
        return np.asarray(orjson.loads(body)["predictions"], dtype=np.float32)
    if "inference-header-content-length" in headers:
        size = int(headers["inference-header-content-length"])
        doc = orjson.loads(body[:size])
        shape = doc["outputs"][0]["shape"]
        return np.frombuffer(body[size:], dtype=np.float32).reshape(shape)
    out = orjson.loads(body)["outputs"][0]
    return np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])


@pytest.fixture(scope="session")
def reference(repo: Repo) -> Callable[[np.ndarray], np.ndarray]:
    compiled = ov.Core().compile_model(str(repo.classifier_xml), "CPU")
    return lambda x: compiled({0: x})[0]


@pytest.fixture(scope="session")
def tensor() -> np.ndarray:
    return np.random.default_rng(7).random((1, 3, 224, 224), dtype=np.float32)


@pytest.fixture(scope="session")
def jpeg() -> tuple[bytes, np.ndarray]:
    """A synthetic jpeg and the NCHW BGR float tensor it decodes to (as OVMS/OpenCV does)."""
    yy, xx = np.mgrid[0:224, 0:224]
    rgb = np.stack([xx, yy, (xx + yy) // 2], axis=-1).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, format="JPEG", quality=90)
    data = buffer.getvalue()
    decoded = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))[:, :, ::-1]
    return data, np.ascontiguousarray(decoded.transpose(2, 0, 1)[None], dtype=np.float32)


def kserve_binary(x: np.ndarray) -> tuple[bytes, dict[str, str]]:
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
            "outputs": [{"name": "probabilities", "parameters": {"binary_data": True}}],
        }
    )
    return header + x.tobytes(), {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(header)),
    }


@pytest.fixture(scope="session")
def contract_calls(
    tensor: np.ndarray,
    jpeg: tuple[bytes, np.ndarray],
    reference: Callable[[np.ndarray], np.ndarray],
) -> list[Call]:
    image, image_tensor = jpeg
    expected = reference(tensor)
    binary, binary_headers = kserve_binary(tensor)
    json_headers = {"Content-Type": "application/json"}
    kserve_json = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "input",
                    "shape": [1, 3, 224, 224],
                    "datatype": "FP32",
                    "data": tensor.ravel().tolist(),
                }
            ]
        }
    )
    return [
        Call(
            "tfs-row",
            "POST",
            "/v1/models/classifier:predict",
            orjson.dumps({"instances": tensor.tolist()}),
            json_headers,
            expected,
        ),
        Call(
            "tfs-jpeg",
            "POST",
            "/v1/models/classifier:predict",
            orjson.dumps({"instances": [{"b64": _b64(image)}]}),
            json_headers,
            reference(image_tensor),
        ),
        Call(
            "kserve-json",
            "POST",
            "/v2/models/classifier/infer",
            kserve_json,
            json_headers,
            expected,
        ),
        Call(
            "kserve-binary", "POST", "/v2/models/classifier/infer", binary, binary_headers, expected
        ),
    ]


# -- long-running subprocess servers -----------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ready(base: str, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited {proc.returncode}:\n{log.read_text()}")
        try:
            if requests.get(base + "/v2/health/ready", timeout=1).status_code == 200:
                return
        except (requests.ConnectionError, requests.Timeout):  # not up, or still loading
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{proc.args!r} not ready in {timeout} s:\n{log.read_text()}")


def ff_command(port: int) -> list[str]:
    """The REAL functions-framework CLI serving handlers.cloud_run (as infra/cloudrun runs it)."""
    return [
        str(BIN / "functions-framework"),
        "--source",
        "handlers/cloud_run.py",
        "--target",
        "predict",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]


def server_env(repo: Repo, **extra: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _CLEARED} | repo.env() | extra


@contextlib.contextmanager
def running(
    commands: dict[str, tuple[list[str], int]],
    env: dict[str, str],
    logs: Path,
    timeout: float = 60,
) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """Start every `name: (command, port)`, wait up to `timeout` s for each /v2/health/ready;
    stop them after."""
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name, (cmd, _) in commands.items():
            with (logs / f"{name}.log").open("wb") as out:
                procs[name] = subprocess.Popen(
                    cmd,
                    cwd=ROOT,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        for name, proc in procs.items():
            _wait_ready(
                f"http://127.0.0.1:{commands[name][1]}", proc, logs / f"{name}.log", timeout
            )
        yield procs
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
            with contextlib.suppress(ProcessLookupError):  # a worker its arbiter left behind
                os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def servers(repo: Repo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The REAL functions-framework CLI and `ov-serverless serve`, started side by side."""
    ports = {"cloud_run": free_port(), "server": free_port()}
    commands = {
        "cloud_run": (ff_command(ports["cloud_run"]), ports["cloud_run"]),
        "server": (
            [
                str(BIN / "ov-serverless"),
                "serve",
                "--rest_port",
                str(ports["server"]),
                "--config_path",
                str(repo.config),
                "--log_level",
                "WARNING",
            ],
            ports["server"],
        ),
    }
    with running(commands, server_env(repo), tmp_path_factory.mktemp("server-logs")):
        yield {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
