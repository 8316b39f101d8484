"""handlers.aws_lambda.sources on the sample events in tests/events/: each source class turns its
event into a core.api.Request and a core.api.Response into its reply, within its payload limits.
Pure translation: no model repository, no environment."""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import orjson
import pytest

from core.api import Response
from core.errors import InvalidInputError, PayloadTooLargeError
from handlers.aws_lambda.sources import (
    ALB_PAYLOAD,
    LAMBDA_PAYLOAD,
    SOURCES,
    Alb,
    DirectInvoke,
    HttpV2,
    Limit,
    RestV1,
    detect,
    headers,
)
from tests.handlers.conftest import ROOT, load_event

WIDE = Limit(1 << 20, "test")
JSON_REPLY = Response(200, b'{"ok":true}', {"content-type": "application/json", "x-a": "1"})
BINARY_REPLY = Response(200, b"\x00\xff", {"content-type": "application/octet-stream"})


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("powertools/apiGatewayProxyEvent", RestV1),
        ("sam-cli-rendered/AwsProxy", RestV1),
        ("powertools/apiGatewayProxyV2Event", HttpV2),
        ("powertools/apiGatewayProxyV2Event_GET", HttpV2),
        ("sam-cli-rendered/HttpApi", HttpV2),
        ("powertools/lambdaFunctionUrlEvent", HttpV2),
        ("powertools/lambdaFunctionUrlIAMEvent", HttpV2),
        ("powertools/lambdaFunctionUrlEventWithHeaders", HttpV2),
        ("powertools/albEvent", Alb),
        ("powertools/albMultiValueHeadersEvent", Alb),
        ("powertools/albMultiValueQueryStringEvent", Alb),
        ("sam-cli-rendered/ALBRequest", Alb),
    ],
)
def test_detect_by_shape(name: str, cls: type) -> None:
    assert type(detect(load_event(name))) is cls


def test_anything_else_is_a_direct_invoke() -> None:
    for event in ({"path": "/v2/models/m"}, {}, [], "text", None):
        assert type(detect(event)) is DirectInvoke
    assert type(SOURCES[-1]) is DirectInvoke


def test_detection_and_request_translation() -> None:
    expected = {
        "powertools/apiGatewayProxyEvent": RestV1,
        "powertools/apiGatewayProxyV2Event": HttpV2,
        "powertools/lambdaFunctionUrlEvent": HttpV2,
        "powertools/albMultiValueHeadersEvent": Alb,
    }
    for name, cls in expected.items():
        assert type(detect(load_event(name))) is cls
    v1 = load_event("powertools/apiGatewayProxyEvent")
    request = RestV1().request(v1, Limit(1 << 20, "test"))
    assert request.headers["header2"] == "value1,value2"  # from multiValueHeaders
    assert request.query == {"parameter1": "value2", "parameter2": "value"}
    alb = load_event("powertools/albMultiValueQueryStringEvent")
    alb["multiValueQueryStringParameters"]["q"] = ["a%20b%2Fc"]  # ALB does not decode
    assert Alb().request(alb, Limit(1 << 20, "test")).query["q"] == "a b/c"
    v2 = HttpV2().request(load_event("powertools/apiGatewayProxyV2Event"), Limit(1 << 20, "test"))
    assert v2.query == {"parameter1": "value2", "parameter2": "value"}
    assert v2.headers["cookie"] == "cookie1; cookie2"


def test_rest_v1_request() -> None:
    request = RestV1().request(load_event("powertools/apiGatewayProxyEvent"), WIDE)
    assert (request.method, request.path) == ("GET", "/my/path")
    assert request.body == b"Hello from Lambda!"
    assert request.headers["header1"] == "value1"
    assert request.headers["header2"] == "value1,value2"  # multiValueHeaders win, joined
    assert request.query == {"parameter1": "value2", "parameter2": "value"}  # last value


def test_rest_v1_base64_body_and_stage() -> None:
    event = load_event("sam-cli-rendered/AwsProxy")
    request = RestV1().request(event, WIDE)
    assert (request.method, request.path) == ("POST", "/path/to/resource")
    assert request.body == b'{"test":"body"}'  # isBase64Encoded: decoded
    assert request.query == {"foo": "bar"}
    event["path"] = event["requestContext"]["path"]  # a custom domain: both carry the stage
    assert RestV1().request(event, WIDE).path == "/path/to/resource"
    event["requestContext"].update(stage="path")  # a stage the path does not start with
    event["path"] = event["requestContext"]["path"] = "/pathway/x"
    assert RestV1().request(event, WIDE).path == "/pathway/x"


def test_rest_v1_reply() -> None:
    event = load_event("powertools/apiGatewayProxyEvent")
    reply = RestV1().reply(event, JSON_REPLY)
    assert reply == {
        "statusCode": 200,
        "headers": {"content-type": "application/json", "x-a": "1"},
        "multiValueHeaders": {"content-type": ["application/json"], "x-a": ["1"]},
        "body": '{"ok":true}',
        "isBase64Encoded": False,
    }


def test_http_v2_request() -> None:
    request = HttpV2().request(load_event("powertools/apiGatewayProxyV2Event"), WIDE)
    assert (request.method, request.path) == ("POST", "/my/path")
    assert request.body == b'{"message": "hello world", "username": "tom"}'
    assert request.query == {"parameter1": "value2", "parameter2": "value"}
    assert request.headers["cookie"] == "cookie1; cookie2"
    assert request.headers["header2"] == "value1,value2"
    request = HttpV2().request(load_event("sam-cli-rendered/HttpApi"), WIDE)
    assert request.body == b'{"test":"body"}'


def test_http_v2_named_stage_is_stripped() -> None:
    event = load_event("sam-cli-rendered/HttpApi")
    event["requestContext"]["stage"] = "prod"
    event["rawPath"] = "/prod/v2/models/m"
    assert HttpV2().request(event, WIDE).path == "/v2/models/m"
    event["rawPath"] = "/production/v2"  # not the stage segment: left alone
    assert HttpV2().request(event, WIDE).path == "/production/v2"


def test_percent_encoded_paths_are_decoded_once() -> None:
    """REST APIs, Function URLs and ALBs pass the path percent-encoded as the client sent it,
    HTTP APIs (payload 2.0 and 1.0) already decoded: the router sees it decoded once, as
    `serve` decodes a request line."""
    sent = "/v2/models/my%20model%3Av1"
    for name in ("sam-cli-rendered/AwsProxy", "powertools/lambdaFunctionUrlEvent"):
        event = load_event(name, sent)
        assert detect(event).request(event, WIDE).path == "/v2/models/my model:v1", name
    for name in ("powertools/albEvent", "powertools/albMultiValueHeadersEvent"):
        assert Alb().request(load_event(name, sent), WIDE).path == "/v2/models/my model:v1"
    # An HTTP API decoded "%2520" into "%20" already: a second decoding would change it.
    http_api = load_event("sam-cli-rendered/HttpApi", "/v2/models/a%20b")
    assert HttpV2().request(http_api, WIDE).path == "/v2/models/a%20b"
    payload_1 = load_event("powertools/apiGatewayProxyEvent", "/v2/models/a%20b")
    assert payload_1["version"] == "1.0"  # HTTP API payload 1.0: decoded too
    assert RestV1().request(payload_1, WIDE).path == "/v2/models/a%20b"


def test_function_url_request_and_reply() -> None:
    event = load_event("powertools/lambdaFunctionUrlEvent")
    request = HttpV2().request(event, WIDE)
    assert (request.method, request.path, request.body, request.query) == ("GET", "/", b"", {})
    reply = HttpV2().reply(event, BINARY_REPLY)
    assert reply == {
        "statusCode": 200,
        "headers": {"content-type": "application/octet-stream"},
        "body": base64.b64encode(b"\x00\xff").decode(),
        "isBase64Encoded": True,
    }


def test_alb_request() -> None:
    request = Alb().request(load_event("powertools/albEvent"), WIDE)
    assert (request.method, request.path, request.body) == ("GET", "/lambda", b"Test")
    assert request.query == {"query": "1234ABCD"}
    event = load_event("powertools/albMultiValueQueryStringEvent")
    event["multiValueQueryStringParameters"]["q"] = ["a%20b%2Fc"]  # ALB does not decode
    assert Alb().request(event, WIDE).query == {
        "parameter1": "value2",
        "parameter2": "value",
        "q": "a b/c",
    }
    request = Alb().request(load_event("powertools/albMultiValueHeadersEvent"), WIDE)
    assert request.headers["user-agent"] == "curl/7.79.1"
    assert Alb().request(load_event("sam-cli-rendered/ALBRequest"), WIDE).body == b'{"test":"body"}'


def test_alb_reply_keeps_the_events_header_form() -> None:
    single = Alb().reply(load_event("powertools/albEvent"), JSON_REPLY)
    assert single["statusDescription"] == "200 OK"
    assert single["headers"] == {"content-type": "application/json", "x-a": "1"}
    assert "multiValueHeaders" not in single
    multi = Alb().reply(load_event("powertools/albMultiValueHeadersEvent"), Response(404, b"{}"))
    assert multi["statusDescription"] == "404 Not Found"
    assert multi["multiValueHeaders"] == {"content-type": ["application/json"]}
    assert "headers" not in multi


def test_direct_invoke() -> None:
    request = DirectInvoke().request(
        {"path": "/v1/models/m:predict", "body": {"instances": [[1]]}}, WIDE
    )
    assert (request.method, request.path) == ("POST", "/v1/models/m:predict")
    assert orjson.loads(request.body) == {"instances": [[1]]}
    request = DirectInvoke().request(
        {"path": "/v2/models/m", "headers": {"X-A": 1}, "query": {"n": 2}}, WIDE
    )
    assert (request.method, request.body) == ("GET", b"")
    assert request.headers == {"x-a": "1"} and request.query == {"n": "2"}
    with pytest.raises(InvalidInputError, match='"path"'):
        DirectInvoke().request({"instances": [[1]]}, WIDE)


def test_request_limits_name_the_source() -> None:
    assert Alb().limit(100 * ALB_PAYLOAD) == Limit(ALB_PAYLOAD, Alb.label)
    assert HttpV2().limit(100 * LAMBDA_PAYLOAD) == Limit(LAMBDA_PAYLOAD, HttpV2.label)
    assert RestV1().limit(1000) == Limit(1000, f"OVS_MAX_REQUEST_BYTES, {RestV1.label}")
    event = load_event("powertools/albEvent")
    for encoded in (False, True):
        event.update(body="QUJD" * 300, isBase64Encoded=encoded)  # 1200 chars, 900 bytes
        size = 900 if encoded else 1200
        with pytest.raises(
            PayloadTooLargeError, match=f"{size} bytes exceeds the limit of 899 bytes"
        ):
            Alb().request(event, Limit(899, "ALB"))
    event.update(body="!" * 4000, isBase64Encoded=True)  # over the limit: 413, never decoded
    with pytest.raises(PayloadTooLargeError):
        Alb().request(event, Limit(100, "ALB"))
    event.update(body="not base64!", isBase64Encoded=True)
    with pytest.raises(InvalidInputError, match="base64"):
        Alb().request(event, WIDE)


def test_reply_over_the_payload_limit() -> None:
    event = load_event("powertools/albEvent")
    small = Alb().reply(event, JSON_REPLY)
    assert Alb().reply_too_large(small) is None
    big = Alb().reply(event, Response(200, b'"' + b"x" * ALB_PAYLOAD + b'"'))
    error = Alb().reply_too_large(big)
    assert error is not None and error.http_status == 413
    assert f"limit of {ALB_PAYLOAD} bytes" in error.message and "ALB" in error.message
    assert HttpV2().reply_too_large(big) is None  # 1 MB fits Lambda's 6 MB


def test_headers_of_any_event() -> None:
    assert headers(load_event("powertools/albMultiValueHeadersEvent"))["accept"] == "*/*"
    assert headers(["not", "a", "dict"]) == {}


def test_importing_the_package_does_no_work() -> None:
    """No environment read, no logging set up, no App built: only the Lambda bootstrap's
    lookup of `handler` runs the init phase, once."""
    probe = (
        "import json, logging, sys, core.api\n"
        "import handlers.aws_lambda.sources, handlers.aws_lambda as aws\n"
        "print(json.dumps([core.api._default_app is None, logging.getLogger().handlers == [],\n"
        "                  'handlers.snapstart' in sys.modules, 'handler' in vars(aws)]))\n"
        "sys.stdout.flush(); sys.stderr.write('imported\\n'); sys.stderr.flush()\n"
        "print(json.dumps([aws.handler is aws.handler, 'handlers.snapstart' in sys.modules,\n"
        "                  'handler' in vars(aws), callable(aws.handler)]))\n"
    )
    env = {"PYTHONPATH": str(ROOT), "OVS_CONFIG_PATH": "/nonexistent/config.json"}
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    imported, looked_up = out.stdout.splitlines()
    assert json.loads(imported) == [True, True, False, False]
    assert json.loads(looked_up) == [True, True, True, True]
    before, after = out.stderr.split("imported\n")
    assert before == ""  # nothing logged on import
    assert after.count("Not serving") == 1  # the init phase ran once, and did not raise
