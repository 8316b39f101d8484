"""Acceptance: the SAME requests give the same numbers through every transport.

TFS row JSON, TFS jpeg {"b64": ...}, KServe JSON and KServe binary go through Lambda (HTTP API
event, base64 body), the real functions-framework server (Cloud Run), the Azure function and
the long-running `ov-serverless serve`; all must agree exactly and match direct OpenVINO.
"""

from __future__ import annotations

from collections.abc import Callable

import azure.functions as func
import numpy as np
import pytest
import requests

from handlers import aws_lambda, azure_functions
from tests.handlers.conftest import (
    AzureContext,
    Call,
    LambdaContext,
    load_event,
    outputs,
    reply_body,
    reply_headers,
)


def test_same_numbers_everywhere(
    serving_env: pytest.MonkeyPatch, servers: dict[str, str], contract_calls: list[Call]
) -> None:
    handler = aws_lambda.build()
    (azure_function,) = azure_functions.build().get_functions()
    session = requests.Session()

    def via_lambda(call: Call) -> np.ndarray:
        event = load_event(
            "sam-cli-rendered/HttpApi",
            call.path,
            call.body,
            base64=True,
            method=call.method,
            headers=call.headers,
        )
        reply = handler(event, LambdaContext())
        return outputs(call, reply["statusCode"], reply_headers(reply), reply_body(reply))

    def via_azure(call: Call) -> np.ndarray:
        request = func.HttpRequest(
            call.method,
            "https://ovs.azurewebsites.net" + call.path,
            body=call.body,
            headers=call.headers,
            route_params={"path": call.path[1:]},
        )
        response = azure_function.get_user_function()(request, AzureContext())
        return outputs(call, response.status_code, dict(response.headers), response.get_body())

    def via_http(base: str) -> Callable[[Call], np.ndarray]:
        def send(call: Call) -> np.ndarray:
            reply = session.request(
                call.method, base + call.path, data=call.body, headers=call.headers, timeout=30
            )
            return outputs(call, reply.status_code, dict(reply.headers), reply.content)

        return send

    transports = {
        "lambda": via_lambda,
        "azure": via_azure,
        "cloud_run": via_http(servers["cloud_run"]),
        "server": via_http(servers["server"]),
    }
    for call in contract_calls:
        got = {name: send(call) for name, send in transports.items()}
        assert call.expected is not None
        np.testing.assert_allclose(
            got["server"], call.expected, rtol=1e-5, atol=1e-6, err_msg=call.name
        )
        for name, value in got.items():
            np.testing.assert_array_equal(value, got["server"], err_msg=f"{call.name}: {name}")
