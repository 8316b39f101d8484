"""The real Lambda bootstrap (`python -m awslambdaric handlers.aws_lambda.handler`) against a
small local Lambda Runtime API (the 2018-06-01 protocol), as in a container image."""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from tests.handlers.conftest import (
    _CLEARED,
    ROOT,
    Repo,
    kserve_binary,
    load_event,
    reply_body,
    reply_headers,
)

PREFIX = "/2018-06-01/runtime"


class RuntimeApi(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.events: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
        self.results: queue.Queue[tuple[str, str, Any]] = queue.Queue()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: RuntimeApi

    def do_GET(self) -> None:  # noqa: N802
        if self.path != PREFIX + "/invocation/next":
            return self._reply(404, b"{}")
        try:
            request_id, event = self.server.events.get(timeout=60)
        except queue.Empty:
            return self._reply(500, b'{"errorMessage": "no more events in this test"}')
        self._reply(
            200,
            orjson.dumps(event),
            {
                "Lambda-Runtime-Aws-Request-Id": request_id,
                "Lambda-Runtime-Deadline-Ms": str(int((time.time() + 60) * 1000)),
                "Lambda-Runtime-Invoked-Function-Arn": (
                    "arn:aws:lambda:us-east-1:123456789012:function:ovs"
                ),
                "Lambda-Runtime-Trace-Id": "Root=1-5bef4de7-ad49b0e87f6ef6c87fc2e700",
            },
        )

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        parts = self.path[len(PREFIX) :].strip("/").split("/")  # invocation/ID/response|error
        kind = parts[-1]
        request_id = parts[1] if parts[0] == "invocation" else "init"
        self.server.results.put((request_id, kind, json.loads(body or b"null")))
        self._reply(202, b'{"status": "OK"}')

    def _reply(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in {"Content-Type": "application/json", **(headers or {})}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


EVENTS_DIR = Path(__file__).parents[2] / "events"
SAMPLES = sorted(f"{p.parent.name}/{p.stem}" for p in EVENTS_DIR.glob("*/*.json"))


class Bootstrap:
    """The real awslambdaric bootstrap (as the Lambda image's ENTRYPOINT + CMD run it) against
    a local Runtime API on 127.0.0.1: `invoke` queues events and returns each reply."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.api = RuntimeApi()
        threading.Thread(target=self.api.serve_forever, daemon=True).start()
        self.log = log
        env = env | {
            "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{self.api.server_address[1]}",
            "AWS_LAMBDA_FUNCTION_NAME": "ovs",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "3008",
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_LOG_GROUP_NAME": "/aws/lambda/ovs",
            "AWS_LAMBDA_LOG_STREAM_NAME": "test",
            "_HANDLER": argv[-1],
        }
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        self.count = 0

    def invoke(self, *events: dict[str, Any]) -> list[tuple[str, Any]]:
        ids = []
        for event in events:
            self.count += 1
            ids.append(f"req-{self.count}")
            self.api.events.put((ids[-1], event))
        results: dict[str, tuple[str, Any]] = {}
        while len(results) < len(ids):
            try:
                request_id, kind, payload = self.api.results.get(timeout=120)
            except queue.Empty:
                raise AssertionError(
                    f"no result from the runtime:\n{self.log.read_text()}"
                ) from None
            assert request_id != "init", f"init error: {payload}\n{self.log.read_text()}"
            results[request_id] = (kind, payload)
        return [results[i] for i in ids]

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.api.shutdown()
        self.api.server_close()


def _bootstrap_argv(python: str = sys.executable) -> list[str]:
    """The Lambda image's ENTRYPOINT + CMD, with this interpreter for the image's venv."""
    from tests.test_infra import DOCKERFILES, image_config

    argv = image_config(DOCKERFILES["lambda"]).argv
    assert argv[0] == "/opt/venv/bin/python"
    return [python, *argv[1:]]


def _env(repo: Repo) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _CLEARED} | repo.env()


def test_awslambdaric_bootstrap_serves_two_invocations(repo: Repo, tmp_path: Path) -> None:
    runtime = Bootstrap(_bootstrap_argv(), _env(repo), tmp_path / "runtime.log")
    try:
        (kind1, first), (kind2, second) = runtime.invoke(
            load_event(
                "sam-cli-rendered/HttpApi",
                "/v1/models/scaler:predict",
                b'{"instances": [[1, 2, 3, 4]]}',
                base64=True,
                method="POST",
            ),
            load_event(
                "powertools/apiGatewayProxyV2Event",
                "/v1/models/two_inputs:predict",
                b'{"inputs": {"a": [[1, 2, 3, 4]], "b": [[2, 2, 2, 2]]}}',
                method="POST",
            ),
        )
    finally:
        runtime.close()
    assert kind1 == kind2 == "response"
    assert first["statusCode"] == 200 and first["isBase64Encoded"] is False
    assert orjson.loads(reply_body(first)) == {"predictions": [[2.0, 4.0, 6.0, 8.0]]}
    assert orjson.loads(reply_body(second)) == {
        "outputs": {"sum": [[3.0, 4.0, 5.0, 6.0]], "product": [[2.0, 4.0, 6.0, 8.0]]}
    }
    cold = [
        line for line in runtime.log.read_text().splitlines() if "ov_serverless_cold_start" in line
    ]
    assert len(cold) == 1 and '"request_id":"req-1"' in cold[0]


def _assert_shape(event: dict[str, Any], reply: dict[str, Any]) -> None:
    """The reply format each source expects (an ALB drops anything else with a 502)."""
    assert isinstance(reply["statusCode"], int) and isinstance(reply["body"], str)
    assert isinstance(reply["isBase64Encoded"], bool)
    if "elb" in event["requestContext"]:
        assert reply["statusDescription"].startswith(str(reply["statusCode"]) + " ")
        multi = "multiValueHeaders" in event
        assert ("multiValueHeaders" in reply) is multi and ("headers" in reply) is not multi
    elif event.get("version") == "2.0":
        assert "multiValueHeaders" not in reply and "statusDescription" not in reply
    else:
        assert "headers" in reply and "multiValueHeaders" in reply


@pytest.mark.parametrize("python", ["3.11", "3.12"])
def test_every_sample_event_through_the_bootstrap(
    python: str,
    repo: Repo,
    tensor: np.ndarray,
    reference: Callable[[np.ndarray], np.ndarray],
    tmp_path: Path,
) -> None:
    """Every sample event in tests/events/ (API Gateway v1 with a stage, HTTP API v2,
    Function URL, ALB single and multi-value) carrying a health call, a TFS predict and a
    KServe binary infer, through the real bootstrap; shapes per source, numbers checked."""
    interpreter = sys.executable if python == "3.11" else _python312()
    version = subprocess.run(
        [interpreter, "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert version == f"({python.replace('.', ', ')})"
    binary, headers = kserve_binary(tensor)
    events = []
    for name in SAMPLES:
        events += [
            load_event(name, "/v2/health/ready", method="GET"),
            load_event(
                name,
                "/v1/models/scaler:predict",
                b'{"instances": [[1, 2, 3, 4]]}',
                method="POST",
                headers={"Content-Type": "application/json"},
            ),
            load_event(
                name,
                "/v2/models/classifier/infer",
                binary,
                base64=True,
                method="POST",
                headers=headers,
            ),
        ]
    runtime = Bootstrap(_bootstrap_argv(interpreter), _env(repo), tmp_path / "runtime.log")
    try:
        results = runtime.invoke(*events)
    finally:
        runtime.close()
    expected = reference(tensor)
    for i, (event, (kind, reply)) in enumerate(zip(events, results, strict=True)):
        name = SAMPLES[i // 3]
        assert kind == "response", (name, reply)
        _assert_shape(event, reply)
        assert reply["statusCode"] == 200, (name, reply)
        body = reply_body(reply)
        if i % 3 == 1:
            assert orjson.loads(body) == {"predictions": [[2.0, 4.0, 6.0, 8.0]]}, name
        elif i % 3 == 2:
            assert reply["isBase64Encoded"] is True, name
            size = int(reply_headers(reply)["inference-header-content-length"])
            got = np.frombuffer(body[size:], dtype=np.float32).reshape(expected.shape)
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_init_error_path_answers_cleanly(repo: Repo, tmp_path: Path) -> None:
    """No models configured: the Runtime API sees a clean 503 reply per invocation, never an
    /init/error (after which Lambda re-runs the init on every invoke and answers 502)."""
    env = {k: v for k, v in _env(repo).items() if k != "OVS_CONFIG_PATH"}
    runtime = Bootstrap(_bootstrap_argv(), env, tmp_path / "runtime.log")
    try:
        results = runtime.invoke(
            *(load_event(name, "/v2/health/ready", method="GET") for name in SAMPLES)
        )
    finally:
        runtime.close()
    for (kind, reply), name in zip(results, SAMPLES, strict=True):
        assert kind == "response", (name, reply)
        assert reply["statusCode"] == 503, (name, reply)
        assert "OVS_CONFIG_PATH" in orjson.loads(reply_body(reply))["error"]


def test_template_defaults_serve_the_baked_demo(tmp_path: Path) -> None:
    """What `sam build && sam deploy` with every default gives: the image's demo stage
    (the build's own demo-repo line), the template's env for the function, the image's
    command; health and a predict answer."""
    from tests.test_infra import DOCKERFILES, image_config, instr

    run = " ".join(instr(DOCKERFILES["lambda"], "RUN"))
    written = re.search(r"ov-serverless demo-repo (\S+)", run)
    assert written
    demo = tmp_path / "demo-models"
    subprocess.run(
        [str(Path(sys.executable).parent / "ov-serverless"), "demo-repo", str(demo)],
        check=True,
        cwd=ROOT,
        capture_output=True,
        timeout=300,
    )
    image = image_config(DOCKERFILES["lambda"])  # BAKE_MODELS=demo, the template's value
    env = {k: v for k, v in os.environ.items() if not k.startswith("OVS_")}
    env |= image.env | _template_env() | {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    assert env["OVS_CONFIG_PATH"] == "/opt/models/config.json"
    env["OVS_CONFIG_PATH"] = str(demo / "config.json")  # where the image's COPY puts it
    env["OVS_CACHE_DIR"] = str(tmp_path / "cache")
    runtime = Bootstrap(_bootstrap_argv(), env, tmp_path / "runtime.log")
    try:
        (k1, ready), (k2, predict) = runtime.invoke(
            load_event("powertools/lambdaFunctionUrlEvent", "/v2/health/ready", method="GET"),
            load_event(
                "powertools/lambdaFunctionUrlEvent",
                "/v1/models/scaler:predict",
                b'{"instances": [[1, 2, 3, 4]]}',
                method="POST",
            ),
        )
    finally:
        runtime.close()
    assert (k1, k2) == ("response", "response")
    assert ready["statusCode"] == 200, ready
    assert orjson.loads(reply_body(predict)) == {"predictions": [[2.0, 4.0, 6.0, 8.0]]}


def _template_env() -> dict[str, str]:
    """The function's environment with every template parameter at its default, after the SAM
    transform and CloudFormation's conditions (tests/test_infra.py)."""
    from tests.test_infra import deployed, sam_transform

    with pytest.MonkeyPatch.context() as mp:
        cfn = sam_transform(mp)
    fn = deployed(cfn)["Resources"]["InferenceFunction"]["Properties"]
    env: dict[str, str] = fn["Environment"]["Variables"]
    assert all(isinstance(v, str) for v in env.values()), env
    return env


def _python312() -> str:
    """The Lambda image's CPython 3.12 with its packages: OVS_LAMBDA_PYTHON, or the
    environment infra/ci/lambda-python.sh makes."""
    python = Path(os.environ.get("OVS_LAMBDA_PYTHON") or ROOT / ".ci" / "py312" / "bin" / "python")
    if not python.exists():
        pytest.skip("no CPython 3.12 environment: run infra/ci/lambda-python.sh")
    return str(python)
