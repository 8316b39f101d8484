"""handlers.azure_functions: the registered v2-model function called with real
azure.functions.HttpRequest objects, as the worker calls it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import azure.functions as func
import numpy as np
import orjson
import pytest
from azure.functions.decorators.function_app import Function

import core.api
import core.logs
from handlers import azure_functions
from tests.handlers.conftest import ROOT, AzureContext, kserve_binary


@pytest.fixture
def azure(serving_env: pytest.MonkeyPatch) -> Function:
    """The one registered function (get_functions() may run once per app, as in the worker)."""
    (function,) = azure_functions.build().get_functions()
    return function


def call(
    function: Function,
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
) -> func.HttpResponse:
    request = func.HttpRequest(
        method,
        f"https://ovs.azurewebsites.net{path}",
        body=body,
        headers=headers or {},
        route_params={"path": path[1:]},
    )
    response: func.HttpResponse = function.get_user_function()(request, AzureContext())
    return response


def test_registration(azure: Function) -> None:
    trigger: Any = azure.get_trigger()
    assert trigger.route == "{*path}" and trigger.auth_level == func.AuthLevel.ANONYMOUS
    assert {"GET", "POST"} <= {str(m) for m in trigger.methods}
    assert core.api._default_app is not None  # built by build() (worker indexing)


def test_importing_the_module_does_no_work() -> None:
    """Import: no logging level set, no App built; the worker's lookup of `app` (function_app.py
    imports it by name) builds the FunctionApp once."""
    probe = (
        "import json, logging, core.api, handlers.azure_functions as module\n"
        "print(json.dumps([core.api._default_app is None, logging.getLogger().level,\n"
        "                  'app' in vars(module)]))\n"
        "from handlers.azure_functions import app\n"
        "print(json.dumps([app is module.app, len(app.get_functions()),\n"
        "                  logging.getLogger().level]))\n"
    )
    env = {
        "PYTHONPATH": str(ROOT),
        "OVS_CONFIG_PATH": "/nonexistent/config.json",
        "OVS_LOG_LEVEL": "ERROR",
    }
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    imported, looked_up = out.stdout.splitlines()
    assert json.loads(imported) == [True, 30, False]  # the root logger's default, WARNING
    assert json.loads(looked_up) == [True, 1, 40]  # OVS_LOG_LEVEL applied by the build


def test_auth_level_from_env(serving_env: pytest.MonkeyPatch) -> None:
    serving_env.setenv("OVS_AZURE_AUTH_LEVEL", "function")
    (function,) = azure_functions.build().get_functions()
    trigger: Any = function.get_trigger()
    assert trigger.auth_level == func.AuthLevel.FUNCTION


def test_json_routes(azure: Function) -> None:
    response = call(azure, "GET", "/v2/models/classifier")
    assert response.status_code == 200 and response.mimetype == "application/json"
    assert orjson.loads(response.get_body())["name"] == "classifier"
    response = call(azure, "POST", "/v1/models/scaler:predict", b'{"instances": [[1, 2, 3, 4]]}')
    assert orjson.loads(response.get_body()) == {"predictions": [[2.0, 4.0, 6.0, 8.0]]}
    response = call(azure, "GET", "/v3/nothing")
    assert response.status_code == 404
    assert orjson.loads(response.get_body())["error"] == {
        "message": "Invalid URL (GET /v3/nothing)",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }


def test_url_path_without_route_params(azure: Function) -> None:
    request = func.HttpRequest("GET", "http://localhost:7071/v2/models/scaler/ready", body=b"")
    assert azure.get_user_function()(request, AzureContext()).status_code == 200
    assert core.logs.request_id.get() == "azure-invocation-1"


def test_binary_reply_is_byte_exact(
    azure: Function, tensor: np.ndarray, reference: Callable[[np.ndarray], np.ndarray]
) -> None:
    body, headers = kserve_binary(tensor)
    response = call(azure, "POST", "/v2/models/classifier/infer", body, headers)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/octet-stream"
    assert response.mimetype == "application/octet-stream"
    direct = core.api.default_app().handle(
        core.api.make_request("POST", "/v2/models/classifier/infer", body, headers)
    )
    assert response.get_body() == direct.body  # no utf-8 round trip anywhere
    size = int(response.headers["inference-header-content-length"])
    got = np.frombuffer(response.get_body()[size:], dtype=np.float32).reshape(1, 1000)
    np.testing.assert_allclose(got, reference(tensor), rtol=1e-5, atol=1e-6)
