"""CORS as OVMS's --allowed_origins / --allowed_methods / --allowed_headers / --allow_credentials
set it (OVS_ALLOWED_* on serverless hosts): what a browser's preflight and its requests get back
from every host, with the defaults (`*`) and with an origin list and credentials."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import azure.functions as func
import functions_framework
import pytest
import requests

import core.api
from core.config import Settings, cors_from_env
from core.cors import CorsConfig
from handlers import aws_lambda, azure_functions
from tests.handlers.conftest import (
    BIN,
    ROOT,
    AzureContext,
    LambdaContext,
    Repo,
    free_port,
    load_event,
    reply_body,
    reply_headers,
    running,
    server_env,
)

INFER = "/v2/models/scaler/infer"
BODY = b'{"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}'
PREFLIGHT = {
    "Origin": "https://app.example",
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "content-type",
}
ANY = {
    "access-control-allow-origin": "*",
    "access-control-allow-methods": "*",
    "access-control-allow-headers": "*",
}
Reply = tuple[int, dict[str, str], bytes]
Send = Callable[[str, str, bytes, dict[str, str]], Reply]


def _cors(headers: dict[str, str]) -> dict[str, str]:
    lower = {k.lower(): v for k, v in headers.items()}
    return {k: v for k, v in lower.items() if k.startswith("access-control-") or k == "vary"}


def _lambda(event_name: str) -> Send:
    handler = aws_lambda.build()

    def send(method: str, path: str, body: bytes, headers: dict[str, str]) -> Reply:
        event = load_event(event_name, path, body, base64=True, method=method, headers=headers)
        reply = handler(event, LambdaContext())
        return reply["statusCode"], reply_headers(reply), reply_body(reply)

    return send


def _azure() -> Send:
    (function,) = azure_functions.build().get_functions()

    def send(method: str, path: str, body: bytes, headers: dict[str, str]) -> Reply:
        request = func.HttpRequest(
            method,
            "https://ovs.azurewebsites.net" + path,
            body=body,
            headers=headers,
            route_params={"path": path[1:]},
        )
        response = function.get_user_function()(request, AzureContext())
        return response.status_code, dict(response.headers), response.get_body()

    return send


def _http(base: str) -> Send:
    def send(method: str, path: str, body: bytes, headers: dict[str, str]) -> Reply:
        reply = requests.request(method, base + path, data=body, headers=headers, timeout=30)
        return reply.status_code, dict(reply.headers), reply.content

    return send


def test_every_host_answers_a_preflight_and_allows_any_origin_by_default(
    serving_env: pytest.MonkeyPatch, servers: dict[str, str]
) -> None:
    hosts = {
        "lambda http api": _lambda("sam-cli-rendered/HttpApi"),
        "lambda rest api": _lambda("sam-cli-rendered/AwsProxy"),
        "lambda alb": _lambda("powertools/albMultiValueHeadersEvent"),
        "azure": _azure(),
        "cloud_run": _http(servers["cloud_run"]),
        "server": _http(servers["server"]),
    }
    for name, send in hosts.items():
        status, headers, body = send("OPTIONS", INFER, b"", PREFLIGHT)
        assert (status, _cors(headers), body) == (204, ANY, b""), name
        status, headers, body = send(
            "POST",
            INFER,
            BODY,
            {"Origin": "https://app.example", "Content-Type": "application/json"},
        )
        assert (status, _cors(headers)) == (200, ANY), (name, body[:200])
        status, headers, _ = send("GET", "/v3/nothing", b"", {"Origin": "https://app.example"})
        assert (status, _cors(headers)) == (404, ANY), name
        status, headers, _ = send("OPTIONS", INFER, b"", {})  # no preflight: no such method
        assert status == 405, name


def test_serve_flags_echo_a_listed_origin_and_allow_credentials(repo: Repo, tmp_path: Path) -> None:
    port = free_port()
    command = [
        str(BIN / "ov-serverless"),
        "serve",
        "--rest_port",
        str(port),
        "--config_path",
        str(repo.config),
        "--log_level",
        "WARNING",
        "--max_request_bytes",
        "1000",
        "--allowed_origins",
        "https://a.example, https://b.example",
        "--allowed_methods",
        "POST,GET",
        "--allow_credentials",
    ]
    with running({"server": (command, port)}, server_env(repo), tmp_path):
        send = _http(f"http://127.0.0.1:{port}")
        status, headers, _ = send(
            "OPTIONS", INFER, b"", {**PREFLIGHT, "Origin": "https://b.example"}
        )
        assert "content-length" not in {k.lower() for k in headers}  # RFC 9110, for a 204
        assert (status, _cors(headers)) == (
            204,
            {
                "access-control-allow-origin": "https://b.example",
                "vary": "Origin",
                "access-control-allow-methods": "POST, GET",
                "access-control-allow-headers": "content-type",  # `*` is literal with credentials
                "access-control-allow-credentials": "true",
            },
        )
        status, headers, _ = send("POST", INFER, BODY, {"Origin": "https://c.example"})
        assert status == 200 and "access-control-allow-origin" not in _cors(headers)
        assert _cors(headers)["vary"] == "Origin"
        status, headers, _ = send("POST", INFER, b"x" * 2000, {"Origin": "https://a.example"})
        assert status == 413  # refused by the transport, still readable by the page
        assert _cors(headers)["access-control-allow-origin"] == "https://a.example"


def test_lambda_and_cloud_run_add_cors_to_the_bodies_they_refuse(
    serving_env: pytest.MonkeyPatch,
) -> None:
    serving_env.setenv("OVS_ALLOWED_ORIGINS", "https://a.example")
    serving_env.setenv("OVS_ALLOW_CREDENTIALS", "true")
    serving_env.setenv("OVS_MAX_REQUEST_BYTES", "1000")
    origin = {"Origin": "https://a.example"}
    status, headers, _ = _lambda("sam-cli-rendered/HttpApi")("POST", INFER, b"x" * 2000, origin)
    assert status == 413 and _cors(headers) == {
        "access-control-allow-origin": "https://a.example",
        "vary": "Origin",
        "access-control-allow-methods": "*",
        "access-control-allow-headers": "*",
        "access-control-allow-credentials": "true",
    }
    client = functions_framework.create_app(
        "predict", str(ROOT / "handlers" / "cloud_run.py")
    ).test_client()
    reply = client.post(INFER, data=b"x" * 2000, headers=origin)
    assert reply.status_code == 413
    assert reply.headers["Access-Control-Allow-Origin"] == "https://a.example"


def test_an_empty_origin_list_turns_cors_off(serving_env: pytest.MonkeyPatch) -> None:
    serving_env.setenv("OVS_ALLOWED_ORIGINS", "")
    app = core.api.default_app()
    reply = app.handle(core.api.make_request("POST", INFER, BODY, {"Origin": "https://a.x"}))
    assert reply.status == 200 and _cors(dict(reply.headers)) == {}
    assert app.handle(core.api.make_request("OPTIONS", INFER, b"", PREFLIGHT)).status == 405


def test_the_env_and_flags_parse_as_ovms_lists() -> None:
    env = {
        "OVS_ALLOWED_ORIGINS": " https://a.example ,https://b.example,",
        "OVS_ALLOWED_HEADERS": "content-type, inference-header-content-length",
        "OVS_ALLOW_CREDENTIALS": "1",
    }
    assert Settings.from_env(env).cors == CorsConfig(
        ("https://a.example", "https://b.example"),
        "*",
        "content-type, inference-header-content-length",
        True,
    )
    assert Settings.from_env({}).cors == CorsConfig(("*",), "*", "*", False)
    assert cors_from_env(env, origins="*", credentials=False) == CorsConfig(
        ("*",), "*", "content-type, inference-header-content-length", False
    )
