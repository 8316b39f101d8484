"""The real Lambda bootstrap (`python -m awslambdaric handlers.aws_lambda.handler`) against a
small local Lambda Runtime API (the 2018-06-01 protocol), as in a container image."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson

from tests.handlers.conftest import _CLEARED, ROOT, Repo, load_event, reply_body

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
        self._reply(200, orjson.dumps(event), {
            "Lambda-Runtime-Aws-Request-Id": request_id,
            "Lambda-Runtime-Deadline-Ms": str(int((time.time() + 60) * 1000)),
            "Lambda-Runtime-Invoked-Function-Arn":
                "arn:aws:lambda:us-east-1:123456789012:function:ovs",
            "Lambda-Runtime-Trace-Id": "Root=1-5bef4de7-ad49b0e87f6ef6c87fc2e700",
        })

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        parts = self.path[len(PREFIX):].strip("/").split("/")  # invocation/ID/response|error
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


def test_awslambdaric_bootstrap_serves_two_invocations(repo: Repo, tmp_path: Path) -> None:
    api = RuntimeApi()
    threading.Thread(target=api.serve_forever, daemon=True).start()
    env = {k: v for k, v in os.environ.items() if k not in _CLEARED} | repo.env() | {
        "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{api.server_address[1]}",
        "AWS_LAMBDA_FUNCTION_NAME": "ovs", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "3008",
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST", "AWS_LAMBDA_LOG_GROUP_NAME": "/aws/lambda/ovs",
        "AWS_LAMBDA_LOG_STREAM_NAME": "test", "_HANDLER": "handlers.aws_lambda.handler"}
    log = tmp_path / "runtime.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "awslambdaric",
                                 "handlers.aws_lambda.handler"],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        api.events.put(("req-1", load_event(
            "sam-cli-rendered/HttpApi", "/v1/models/scaler:predict",
            b'{"instances": [[1, 2, 3, 4]]}', base64=True, method="POST")))
        api.events.put(("req-2", load_event(
            "powertools/apiGatewayProxyV2Event", "/v1/models/two_inputs:predict",
            b'{"inputs": {"a": [[1, 2, 3, 4]], "b": [[2, 2, 2, 2]]}}', method="POST")))
        results = {}
        for _ in range(2):
            try:
                request_id, kind, payload = api.results.get(timeout=60)
            except queue.Empty:
                raise AssertionError(f"no result from the runtime:\n{log.read_text()}") from None
            assert kind == "response", (payload, log.read_text())
            results[request_id] = payload
    finally:
        proc.kill()
        proc.wait(timeout=10)
        api.shutdown()
        api.server_close()
    first, second = results["req-1"], results["req-2"]
    assert first["statusCode"] == 200 and first["isBase64Encoded"] is False
    assert orjson.loads(reply_body(first)) == {"predictions": [[2.0, 4.0, 6.0, 8.0]]}
    assert orjson.loads(reply_body(second)) == {"outputs": {
        "sum": [[3.0, 4.0, 5.0, 6.0]], "product": [[2.0, 4.0, 6.0, 8.0]]}}
    cold = [line for line in log.read_text().splitlines() if "ov_serverless_cold_start" in line]
    assert len(cold) == 1 and '"request_id":"req-1"' in cold[0]
