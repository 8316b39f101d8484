"""handlers.aws_lambda with real sample events: every source, base64, stages, limits, warm state.

Each test builds a handler after setting OVS_* env (`handlers.aws_lambda.build()`, what the
Lambda init phase runs), exactly as in a fresh instance.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
import pytest

import core.api
import core.logs
from handlers.aws_lambda import LambdaHandler, build
from handlers.aws_lambda.sources import (
    ALB_PAYLOAD,
    LAMBDA_PAYLOAD,
)
from tests.handlers.conftest import (
    LambdaContext,
    kserve_binary,
    load_event,
    reply_body,
    reply_headers,
)

REST_V1 = ["powertools/apiGatewayProxyEvent", "sam-cli-rendered/AwsProxy"]
HTTP_V2 = ["powertools/apiGatewayProxyV2Event", "sam-cli-rendered/HttpApi"]
FUNCTION_URL = ["powertools/lambdaFunctionUrlEvent", "powertools/lambdaFunctionUrlIAMEvent"]
ALB = ["powertools/albEvent", "sam-cli-rendered/ALBRequest"]
ALB_MULTI = ["powertools/albMultiValueHeadersEvent", "powertools/albMultiValueQueryStringEvent"]
ALL = REST_V1 + HTTP_V2 + FUNCTION_URL + ALB + ALB_MULTI
SCALER_BODY = b'{"instances": [[1.0, 2.0, 3.0, 4.0]]}'


@pytest.fixture
def aws(serving_env: pytest.MonkeyPatch) -> LambdaHandler:
    return build()


def invoke(handler: LambdaHandler, event: dict[str, Any]) -> dict[str, Any]:
    reply: dict[str, Any] = handler(event, LambdaContext())
    json.dumps(reply)  # the runtime serializes the reply: it must be plain JSON
    return reply


@pytest.mark.parametrize("name", ALL)
def test_every_source_routes_metadata_and_predict(aws: LambdaHandler, name: str) -> None:
    meta = invoke(aws, load_event(name, "/v2/models/classifier", method="GET"))
    assert meta["statusCode"] == 200
    assert orjson.loads(reply_body(meta))["inputs"][0]["shape"] == [-1, 3, 224, 224]
    for encoded in (False, True):
        event = load_event(
            name, "/v1/models/scaler:predict", SCALER_BODY, base64=encoded, method="POST"
        )
        reply = invoke(aws, event)
        assert reply["statusCode"] == 200, reply
        assert orjson.loads(reply_body(reply)) == {"predictions": [[2.0, 4.0, 6.0, 8.0]]}
        assert reply["isBase64Encoded"] is False
        assert reply_headers(reply)["content-type"] == "application/json"


@pytest.mark.parametrize("name", ALL)
def test_reply_shape_matches_the_source(aws: LambdaHandler, name: str) -> None:
    event = load_event(name, "/v2/models/classifier/ready", method="GET")
    reply = invoke(aws, event)
    assert reply["statusCode"] == 200
    if name in ALB + ALB_MULTI:
        assert reply["statusDescription"] == "200 OK"
        assert ("multiValueHeaders" in reply) is (name in ALB_MULTI)
        assert ("headers" in reply) is (name in ALB)
    elif name in REST_V1:
        assert set(reply) == {
            "statusCode",
            "headers",
            "multiValueHeaders",
            "body",
            "isBase64Encoded",
        }
    else:
        assert set(reply) == {"statusCode", "headers", "body", "isBase64Encoded"}


def test_stage_prefixes_are_stripped(aws: LambdaHandler, serving_env: pytest.MonkeyPatch) -> None:
    # REST v1 via execute-api: `path` lacks the stage, requestContext.path has it.
    event = load_event("sam-cli-rendered/AwsProxy", "/v2/models/classifier", method="GET")
    assert event["requestContext"]["path"] == "/prod/v2/models/classifier"
    assert invoke(aws, event)["statusCode"] == 200
    # REST v1 via a custom domain mapped without base path: both carry the stage.
    event["path"] = event["requestContext"]["path"]
    assert invoke(aws, event)["statusCode"] == 200
    # HTTP API on a named stage: rawPath starts with it.
    v2 = load_event("sam-cli-rendered/HttpApi", method="GET")
    v2["requestContext"]["stage"] = "prod"
    v2 = load_event_from(v2, "/prod/v2/models/classifier")
    assert invoke(aws, v2)["statusCode"] == 200
    # A stage named like a route segment is left alone where the path lacks it.
    event = load_event("sam-cli-rendered/AwsProxy", "/v2/models/classifier", method="GET")
    event["requestContext"].update(stage="v2", path="/v2/v2/models/classifier")
    assert invoke(aws, event)["statusCode"] == 200
    # OVS_BASE_PATH (API mapping key, CloudFront path) is stripped by the core router.
    serving_env.setenv("OVS_BASE_PATH", "/ml/")
    serving_env.setattr(core.api, "_default_app", None)
    aws = build()
    url = load_event("powertools/lambdaFunctionUrlEvent", "/ml/v2/models/classifier")
    assert invoke(aws, url)["statusCode"] == 200


def load_event_from(event: dict[str, Any], raw_path: str) -> dict[str, Any]:
    event["rawPath"] = event["requestContext"]["http"]["path"] = raw_path
    return event


def test_binary_kserve_reply_is_base64(
    aws: LambdaHandler, tensor: np.ndarray, reference: Callable[[np.ndarray], np.ndarray]
) -> None:
    body, headers = kserve_binary(tensor)
    event = load_event(
        "powertools/lambdaFunctionUrlEvent",
        "/v2/models/classifier/infer",
        body,
        base64=True,
        method="POST",
        headers=headers,
    )
    reply = invoke(aws, event)
    assert reply["statusCode"] == 200 and reply["isBase64Encoded"] is True
    head = reply_headers(reply)
    assert head["content-type"] == "application/octet-stream"
    data = reply_body(reply)
    size = int(head["inference-header-content-length"])
    assert orjson.loads(data[:size])["outputs"][0]["parameters"]["binary_data_size"] == 4000
    got = np.frombuffer(data[size:], dtype=np.float32).reshape(1, 1000)
    np.testing.assert_allclose(got, reference(tensor), rtol=1e-5, atol=1e-6)


def test_oversized_body_is_413_before_decoding(serving_env: pytest.MonkeyPatch) -> None:
    serving_env.setenv("AWS_LAMBDA_FUNCTION_NAME", "ovs")  # the Lambda default limit applies
    aws = build()
    limit = aws.settings.max_request_bytes
    assert limit < 6 * 1024 * 1024
    garbage = "!" * (limit * 4 // 3 + 4096)  # not base64: only a size check answers 413
    for name in ("sam-cli-rendered/HttpApi", "sam-cli-rendered/AwsProxy", "powertools/albEvent"):
        for encoded in (True, False):
            event = load_event(name, "/v1/models/scaler:predict", method="POST")
            event.update(body=garbage, isBase64Encoded=encoded)
            reply = invoke(aws, event)
            assert reply["statusCode"] == 413
            message = orjson.loads(reply_body(reply))["error"]
            wanted = min(limit, ALB_PAYLOAD) if "alb" in name else limit
            assert f"exceeds the limit of {wanted} bytes" in message
            # refused before the router sees it: still in the OpenAI shape on an OpenAI route
            event = load_event(name, "/v3/embeddings", method="POST")
            event.update(body=garbage, isBase64Encoded=encoded)
            reply = invoke(aws, event)
            assert reply["statusCode"] == 413
            error = orjson.loads(reply_body(reply))["error"]
            assert error["type"] == "invalid_request_error"
            assert f"exceeds the limit of {wanted} bytes" in error["message"]


def _rows(count: int) -> bytes:
    """A scaler TFS request of `count` rows: 10 bytes a row in, 18 bytes a row out."""
    return b'{"instances": [' + b",".join([b"[1,2,3,4]"] * count) + b"]}"


@pytest.mark.parametrize("name", ALB + ALB_MULTI)
def test_alb_request_over_1_mb_is_413_naming_the_alb(aws: LambdaHandler, name: str) -> None:
    body = _rows(150_000)  # 1.5 MB: fine through the 6 MB sources, too large for an ALB
    assert ALB_PAYLOAD < len(body) < aws.settings.max_request_bytes
    reply = invoke(aws, load_event(name, "/v1/models/scaler:predict", body, method="POST"))
    assert reply["statusCode"] == 413
    message = orjson.loads(reply_body(reply))["error"]
    assert f"limit of {ALB_PAYLOAD} bytes" in message and "ALB" in message
    reply = invoke(aws, load_event(HTTP_V2[0], "/v1/models/scaler:predict", body, method="POST"))
    assert reply["statusCode"] == 200


def test_reply_over_the_source_limit_is_a_clear_413(aws: LambdaHandler) -> None:
    """900 KB in, 1.6 MB out: the ALB would turn that reply into a bare 502."""
    body = _rows(90_000)
    assert len(body) < ALB_PAYLOAD
    reply = invoke(aws, load_event(ALB[0], "/v1/models/scaler:predict", body, method="POST"))
    assert reply["statusCode"] == 413 and len(json.dumps(reply)) < 1000
    message = orjson.loads(reply_body(reply))["error"]
    assert message.startswith("Response of ") and f"limit of {ALB_PAYLOAD} bytes" in message
    assert "ALB" in message
    reply = invoke(
        aws, load_event(FUNCTION_URL[0], "/v1/models/scaler:predict", body, method="POST")
    )
    assert reply["statusCode"] == 200 and len(json.dumps(reply)) > ALB_PAYLOAD

    big = _rows(400_000)  # 4 MB in, 7.2 MB out: over Lambda's 6 MB response payload
    reply = invoke(
        aws, load_event(FUNCTION_URL[0], "/v1/models/scaler:predict", big, method="POST")
    )
    assert reply["statusCode"] == 413
    message = orjson.loads(reply_body(reply))["error"]
    assert f"limit of {LAMBDA_PAYLOAD} bytes" in message and "Function URL" in message


def test_bad_base64_and_unknown_route(aws: LambdaHandler) -> None:
    event = load_event("sam-cli-rendered/HttpApi", "/v1/models/scaler:predict", method="POST")
    event.update(body="not base64!", isBase64Encoded=True)
    reply = invoke(aws, event)
    assert reply["statusCode"] == 400 and "base64" in orjson.loads(reply_body(reply))["error"]
    reply = invoke(aws, load_event("sam-cli-rendered/HttpApi", "/v3/nothing", method="GET"))
    assert reply["statusCode"] == 404
    assert orjson.loads(reply_body(reply)) == {
        "error": {
            "message": "Invalid URL (GET /v3/nothing)",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }


@pytest.mark.parametrize("name", REST_V1[1:] + FUNCTION_URL + ALB + ALB_MULTI)
def test_percent_encoded_path_is_routed_as_serve_routes_it(aws: LambdaHandler, name: str) -> None:
    """A client that escapes the colon (Java's URLEncoder, some proxies) or a model name: these
    sources pass the path as sent, and `serve` decodes it before routing."""
    event = load_event(name, "/v1/models/scaler%3Apredict", SCALER_BODY, method="POST")
    reply = invoke(aws, event)
    assert reply["statusCode"] == 200, reply_body(reply)
    assert orjson.loads(reply_body(reply)) == {"predictions": [[2.0, 4.0, 6.0, 8.0]]}


def test_direct_invoke(aws: LambdaHandler) -> None:
    reply = invoke(
        aws, {"path": "/v1/models/scaler:predict", "body": {"instances": [[1, 1, 1, 1]]}}
    )
    assert reply["statusCode"] == 200
    assert orjson.loads(reply["body"]) == {"predictions": [[2.0, 2.0, 2.0, 2.0]]}
    assert invoke(aws, {"path": "/v2/models/scaler"})["statusCode"] == 200
    reply = invoke(aws, {"instances": [[1, 1, 1, 1]]})
    assert reply["statusCode"] == 400 and '"path"' in orjson.loads(reply["body"])["error"]


@pytest.mark.parametrize(
    "event",
    [
        {"path": "/v2/models/scaler", "headers": ["Accept: */*"]},
        {"path": "/v2/models/scaler", "method": 5},
        {"path": "/v2/models/scaler", "query": "n=1"},
        {"httpMethod": None, "path": "/v2/models/scaler"},
        {"httpMethod": "GET", "path": ["/v2/models/scaler"]},
        {"httpMethod": "GET", "path": "/v2/models/scaler", "requestContext": 5},
        {"version": "2.0", "rawPath": "/v2/models/scaler", "requestContext": "prod"},
    ],
)
def test_malformed_event_is_a_400_not_a_runtime_error(
    aws: LambdaHandler, event: dict[str, Any]
) -> None:
    """A hand-written event with a field of the wrong type: a clear 400, never an exception
    (the runtime would answer a bare 502, or a direct invoker a traceback with server paths)."""
    reply = invoke(aws, event)
    assert reply["statusCode"] == 400
    error = orjson.loads(reply["body"])["error"]
    assert "event" in error and "/" + "handlers" not in error, error


def _servables(app: core.api.App) -> dict[str, tuple[object, dict[str, float]]]:
    return {
        f"{name}/{number}": (version, dict(version.timings))
        for name, served in app.manager.models.items()
        for number, version in served.versions.items()
    }


def test_init_phase_builds_app_and_warm_calls_reuse_it(
    aws: LambdaHandler, capsys: pytest.CaptureFixture[str]
) -> None:
    app = core.api._default_app
    assert app is not None  # compiled by build() = the Lambda init phase
    before = _servables(app)
    assert all(timings["compile_s"] > 0 for _, timings in before.values())
    event = load_event(
        "powertools/apiGatewayProxyV2Event", "/v1/models/scaler:predict", SCALER_BODY
    )
    assert invoke(aws, event)["statusCode"] == 200
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    (cold,) = [line["ov_serverless_cold_start"] for line in lines]
    assert cold["request_id"] == "test-request-1" and cold["lazy_load"] is False
    assert core.logs.request_id.get() == "test-request-1"  # handed to the router's logs
    assert {"import_s", "config_s", "init_s", "config_apply_s", "first_request_s"} <= set(cold)
    assert set(cold["models"]) == {"classifier/1", "two_inputs/1", "scaler/1"}
    for _ in range(2):
        assert invoke(aws, event)["statusCode"] == 200
    assert capsys.readouterr().out == ""  # logged once per instance
    assert core.api._default_app is app
    after = _servables(app)
    assert after.keys() == before.keys()
    for key, (version, timings) in after.items():
        assert version is before[key][0] and timings == before[key][1]  # no reload/recompile


def test_lazy_load_builds_on_first_call(
    serving_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    serving_env.setenv("OVS_LAZY_LOAD", "1")
    aws = build()
    assert core.api._default_app is None and "init_s" not in aws.cold_start
    event = load_event(
        "powertools/apiGatewayProxyV2Event", "/v1/models/scaler:predict", SCALER_BODY
    )
    assert invoke(aws, event)["statusCode"] == 200
    cold = json.loads(capsys.readouterr().out)["ov_serverless_cold_start"]
    assert cold["lazy_load"] is True and "compile_s" in cold["models"]["scaler/1"]
    assert "compile_s" not in cold["models"]["classifier/1"]  # untouched models stay cold
