"""A misconfigured instance starts anyway and answers every request 503, naming the setting.

Lambda: the init phase (build(), run on the bootstrap's lookup of the handler) must not raise,
or the platform retries the init on every invoke and answers 502. functions-framework: the
server starts. Azure: the worker's indexing (build() on the lookup of app, then
app.get_functions()) still finds the function.
"""

from __future__ import annotations

from typing import Any

import azure.functions as func
import functions_framework
import orjson
import pytest
from azure.functions.decorators.function_app import Function

from handlers import aws_lambda, azure_functions
from tests.handlers.conftest import ROOT, AzureContext, LambdaContext, load_event

SOURCES = [
    "powertools/apiGatewayProxyV2Event",
    "powertools/lambdaFunctionUrlEvent",
    "powertools/apiGatewayProxyEvent",
    "powertools/albEvent",
]
# (env to set, env to drop, text the 503 must contain)
CASES = [
    ({}, ["OVS_CONFIG_PATH"], "OVS_CONFIG_PATH"),
    ({"OVS_NIREQ": "many"}, [], "OVS_NIREQ"),
    ({"OVS_CONFIG_PATH": "/srv/private/area/config.json"}, [], "config.json"),
]


def _misconfigure(env: pytest.MonkeyPatch, setting: dict[str, str], drop: list[str]) -> None:
    for key in drop:
        env.delenv(key, raising=False)
    for key, value in setting.items():
        env.setenv(key, value)


def _assert_503(status: int, body: bytes, wanted: str) -> None:
    assert status == 503, body
    message = orjson.loads(body)["error"]
    assert wanted in message
    assert "/srv/private" not in message  # no absolute server path in a client's reply


@pytest.mark.parametrize(("setting", "drop", "wanted"), CASES)
def test_lambda_init_succeeds_and_every_source_answers_503(
    serving_env: pytest.MonkeyPatch, setting: dict[str, str], drop: list[str], wanted: str
) -> None:
    _misconfigure(serving_env, setting, drop)
    handler = aws_lambda.build()  # the init phase: no exception
    for name in SOURCES:
        for path in ("/v2/health/ready", "/v1/models/scaler:predict"):
            reply: dict[str, Any] = handler(load_event(name, path), LambdaContext())
            _assert_503(reply["statusCode"], reply["body"].encode(), wanted)


@pytest.mark.parametrize(("setting", "drop", "wanted"), CASES)
def test_functions_framework_answers_503(
    serving_env: pytest.MonkeyPatch, setting: dict[str, str], drop: list[str], wanted: str
) -> None:
    _misconfigure(serving_env, setting, drop)
    client = functions_framework.create_app(
        "predict", str(ROOT / "handlers" / "cloud_run.py")
    ).test_client()
    for path in ("/v2/health/ready", "/v2/health/live", "/v1/models/scaler"):
        reply = client.get(path)
        _assert_503(reply.status_code, reply.data, wanted)


def _azure_call(function: Function, path: str) -> func.HttpResponse:
    request = func.HttpRequest(
        "GET",
        f"https://ovs.azurewebsites.net{path}",
        body=b"",
        headers={},
        route_params={"path": path[1:]},
    )
    response: func.HttpResponse = function.get_user_function()(request, AzureContext())
    return response


@pytest.mark.parametrize(
    ("setting", "drop", "wanted"),
    [*CASES, ({"OVS_AZURE_AUTH_LEVEL": "everyone"}, [], "OVS_AZURE_AUTH_LEVEL")],
)
def test_azure_function_registers_and_answers_503(
    serving_env: pytest.MonkeyPatch, setting: dict[str, str], drop: list[str], wanted: str
) -> None:
    _misconfigure(serving_env, setting, drop)
    (function,) = azure_functions.build().get_functions()  # what the worker's indexing does
    trigger: Any = function.get_trigger()
    assert trigger.route == "{*path}"
    if "OVS_AZURE_AUTH_LEVEL" in setting:  # an unknown level: the strictest, never anonymous
        assert trigger.auth_level == func.AuthLevel.ADMIN
    for path in ("/v2/health/ready", "/v1/models/scaler"):
        response = _azure_call(function, path)
        _assert_503(response.status_code, response.get_body(), wanted)
