"""AWS Lambda entry point: `handlers.aws_lambda.handler(event, context)`.

The event's shape picks the source, as Mangum does (first match wins):

    ALB target group      requestContext.elb          reply: statusDescription, and
                                                      multiValueHeaders iff the event had them
    HTTP API / Function URL  version == "2.0"         reply: payload 2.0
    REST API (payload 1.0)   httpMethod               reply: headers + multiValueHeaders
    direct Invoke         anything else               reply: {statusCode, headers, body,
                                                      isBase64Encoded}

A direct Invoke event is a small HTTP request: `{"path": "/v1/models/m:predict",
"method": "POST", "headers": {...}, "body": "<text>" or a JSON value, "isBase64Encoded": false}`
(method defaults to POST with a body, GET without).

Size limits per source (the platform's, and OVS_MAX_REQUEST_BYTES for requests): an ALB target
group passes at most 1 MB of request body and 1 MB of response JSON, the others 6 MB each way
(Lambda's synchronous payload). A request over the limit is answered 413 naming the limit and
the source; a reply over it becomes a 413 with that message instead of the platform's bare 502.
Request bodies flagged `isBase64Encoded` are decoded (after the size check, so an oversized
body is answered 413 without decoding it); binary responses (`Response.is_binary`) go back
base64 with `isBase64Encoded: true`. The API Gateway stage is stripped from the path when the
path still carries it; OVS_BASE_PATH is stripped by the core router.

Warm state: the App (compiled models) is built at import, i.e. in the Lambda init phase, unless
OVS_LAZY_LOAD is set (then on the first invocation). When it cannot be built (no models
configured, a malformed OVS_* value), the init still succeeds and every invocation answers 503
with the reason (handlers.startup). Logs: JSON lines at OVS_LOG_LEVEL. The first invocation of
an instance prints one JSON line with the cold-start breakdown (`COLD_START` holds the same dict).
"""

from __future__ import annotations

import time

_IMPORT_STARTED = time.perf_counter()

import base64  # noqa: E402
import binascii  # noqa: E402
import sys  # noqa: E402
from dataclasses import dataclass, replace  # noqa: E402
from typing import Any  # noqa: E402
from urllib.parse import parse_qsl, unquote_plus  # noqa: E402

import orjson  # noqa: E402

from core.api import (  # noqa: E402
    App,
    Request,
    Response,
    default_app,
    error_response,
    make_request,
    reason_phrase,
)
from core.errors import InvalidInputError, PayloadTooLargeError, ServingError  # noqa: E402
from handlers import startup  # noqa: E402

Event = dict[str, Any]


def _header_map(event: Event) -> dict[str, str]:
    """Single- and multi-value header maps merged; repeated values comma-joined."""
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    for key, values in (event.get("multiValueHeaders") or {}).items():
        if values:
            headers[key.lower()] = ",".join(values)
    return headers


MB = 1024 * 1024
LAMBDA_PAYLOAD = 6 * MB  # synchronous invoke: request and response payload
ALB_PAYLOAD = 1 * MB  # ALB target group: request body, and response JSON


@dataclass(frozen=True)
class Limit:
    """A request body limit and the source it belongs to, for the 413's message."""

    size: int
    source: str


def _body(event: Event, limit: Limit) -> bytes:
    text = event.get("body")
    if text is None:
        return b""
    if not isinstance(text, str):
        raise InvalidInputError("Event body must be a string")
    if event.get("isBase64Encoded"):
        size = len(text) * 3 // 4 - text[-2:].count("=")  # exact for valid base64
        _check_size(size, limit)
        try:
            return base64.b64decode(text, validate=True)
        except binascii.Error:
            raise InvalidInputError("Event body is flagged isBase64Encoded but is not base64") \
                from None
    _check_size(len(text), limit)  # characters <= utf-8 bytes: no encoding before the check
    return text.encode()


def _check_size(size: int, limit: Limit) -> None:
    if size > limit.size:
        raise PayloadTooLargeError(
            f"Request body of {size} bytes exceeds the limit of {limit.size} bytes "
            f"({limit.source})"
        )


def _reply_body(response: Response) -> tuple[str, bool]:
    if response.is_binary:
        return base64.b64encode(response.body).decode("ascii"), True
    return response.body.decode("utf-8", "replace"), False


class RestV1:
    """API Gateway REST API proxy integration (payload 1.0, also HTTP API payload 1.0)."""

    label = "API Gateway REST API (payload 1.0), Lambda's 6 MB payload"
    payload = LAMBDA_PAYLOAD

    @staticmethod
    def matches(event: Event) -> bool:
        return "httpMethod" in event

    def request(self, event: Event, limit: Limit) -> Request:
        return make_request(event["httpMethod"], self.path(event), _body(event, limit),
                            _header_map(event), self.query(event))

    def path(self, event: Event) -> str:
        # `path` normally lacks the stage (requestContext.path has it); a custom domain mapped
        # without a base path sends both with the stage: strip it only then.
        path: str = event.get("path") or "/"
        context = event.get("requestContext") or {}
        stage = context.get("stage") or "$default"
        if stage != "$default" and path == context.get("path"):
            return _strip_prefix(path, "/" + stage)
        return path

    def query(self, event: Event) -> dict[str, str]:
        multi = event.get("multiValueQueryStringParameters") or {}
        query = dict(event.get("queryStringParameters") or {})
        query.update({key: values[-1] for key, values in multi.items() if values})
        return query

    def reply(self, event: Event, response: Response) -> Event:
        body, encoded = _reply_body(response)
        return {"statusCode": response.status, "headers": dict(response.headers),
                "multiValueHeaders": {k: [v] for k, v in response.headers.items()},
                "body": body, "isBase64Encoded": encoded}


class Alb(RestV1):
    """ALB target group: query values arrive percent-encoded; headers single- or multi-value."""

    label = "ALB target group, 1 MB"
    payload = ALB_PAYLOAD

    @staticmethod
    def matches(event: Event) -> bool:
        return "elb" in (event.get("requestContext") or {})

    def path(self, event: Event) -> str:
        return event.get("path") or "/"

    def query(self, event: Event) -> dict[str, str]:
        return {unquote_plus(k): unquote_plus(v) for k, v in super().query(event).items()}

    def reply(self, event: Event, response: Response) -> Event:
        body, encoded = _reply_body(response)
        reply: Event = {"statusCode": response.status,
                        "statusDescription": f"{response.status} {reason_phrase(response.status)}",
                        "body": body, "isBase64Encoded": encoded}
        if "multiValueHeaders" in event:  # lambda.multi_value_headers.enabled on the group
            reply["multiValueHeaders"] = {k: [v] for k, v in response.headers.items()}
        else:
            reply["headers"] = dict(response.headers)
        return reply


class HttpV2:
    """HTTP API payload 2.0 and Lambda Function URLs."""

    label = "HTTP API / Function URL (payload 2.0), Lambda's 6 MB payload"
    payload = LAMBDA_PAYLOAD

    @staticmethod
    def matches(event: Event) -> bool:
        return event.get("version") == "2.0"

    def request(self, event: Event, limit: Limit) -> Request:
        context = event.get("requestContext") or {}
        headers = _header_map(event)
        if event.get("cookies"):
            headers["cookie"] = "; ".join(event["cookies"])
        query = dict(parse_qsl(event.get("rawQueryString") or "", keep_blank_values=True))
        path = event.get("rawPath") or "/"
        stage = context.get("stage") or "$default"
        if stage != "$default":  # a named stage is part of rawPath
            path = _strip_prefix(path, "/" + stage)
        method = (context.get("http") or {}).get("method", "GET")
        return make_request(method, path, _body(event, limit), headers, query)

    def reply(self, event: Event, response: Response) -> Event:
        body, encoded = _reply_body(response)
        return {"statusCode": response.status, "headers": dict(response.headers),
                "body": body, "isBase64Encoded": encoded}


class DirectInvoke:
    """`aws lambda invoke` with {"path", "method", "headers", "body", "isBase64Encoded"}."""

    label = "direct Invoke, Lambda's 6 MB payload"
    payload = LAMBDA_PAYLOAD

    @staticmethod
    def matches(event: Any) -> bool:
        return True

    def request(self, event: Any, limit: Limit) -> Request:
        if not isinstance(event, dict) or not isinstance(event.get("path"), str):
            raise InvalidInputError(
                'A direct Invoke event must be {"path": "/v1/models/NAME:predict", '
                '"method": "POST", "body": ...}')
        body = event.get("body")
        if body is not None and not isinstance(body, str):
            event = {**event, "body": orjson.dumps(body).decode(), "isBase64Encoded": False}
        method = event.get("method") or event.get("httpMethod") or (
            "GET" if body is None else "POST")
        return make_request(method, event["path"], _body(event, limit),
                            {k.lower(): str(v) for k, v in (event.get("headers") or {}).items()},
                            {k: str(v) for k, v in (event.get("query") or {}).items()})

    def reply(self, event: Any, response: Response) -> Event:
        body, encoded = _reply_body(response)
        return {"statusCode": response.status, "headers": dict(response.headers),
                "body": body, "isBase64Encoded": encoded}


Source = Alb | HttpV2 | RestV1 | DirectInvoke
SOURCES: tuple[Source, ...] = (Alb(), HttpV2(), RestV1(), DirectInvoke())


def detect(event: Any) -> Source:
    if isinstance(event, dict):
        for source in SOURCES:
            if source.matches(event):
                return source
    return SOURCES[-1]


def _strip_prefix(path: str, prefix: str) -> str:
    if path == prefix or path.startswith(prefix + "/"):
        return path[len(prefix):] or "/"
    return path


# -- warm state: built once per execution environment ---------------------------------------

COLD_START: dict[str, Any] = {"import_s": time.perf_counter() - _IMPORT_STARTED}
_started = time.perf_counter()
SETTINGS = startup.settings()
startup.configure_logging(SETTINGS.log_level)
COLD_START["config_s"] = time.perf_counter() - _started
COLD_START["lazy_load"] = SETTINGS.lazy_load
if not SETTINGS.lazy_load:
    _started = time.perf_counter()
    startup.preload()  # compile in the init phase: the first request only infers
    COLD_START["init_s"] = time.perf_counter() - _started
_cold = True
from handlers import snapstart  # noqa: E402  (its hooks run only under SnapStart)

snapstart.register(COLD_START)


def handler(event: Any, context: Any) -> Event:
    global _cold
    source = detect(event)
    started = time.perf_counter()
    try:
        app = startup.app()
    except ServingError as exc:
        return source.reply(event, error_response(exc))
    headers = _header_map(event) if isinstance(event, dict) else {}
    try:
        request = source.request(event, _request_limit(source, app.settings.max_request_bytes))
        rid = str(getattr(context, "aws_request_id", "") or "")
        response = app.handle(replace(request, request_id=rid))
    except ServingError as exc:  # an event that is no request (a body over the limit)
        response = app.finish(error_response(exc), headers)
    if _cold:
        _cold = False
        _log_cold_start(context, time.perf_counter() - started)
    reply = source.reply(event, response)
    size = len(orjson.dumps(reply))
    if size > source.payload:  # the platform would drop it for a bare 502
        too_large = PayloadTooLargeError(
            f"Response of {size} bytes exceeds the limit of {source.payload} bytes "
            f"({source.label}): ask for fewer or smaller outputs, or a smaller batch")
        reply = source.reply(event, app.finish(error_response(too_large), headers))
    return reply


def _request_limit(source: Source, configured: int) -> Limit:
    if configured < source.payload:
        return Limit(configured, f"OVS_MAX_REQUEST_BYTES, {source.label}")
    return Limit(source.payload, source.label)


def _log_cold_start(context: Any, first_request_s: float) -> None:
    COLD_START["request_id"] = getattr(context, "aws_request_id", None)
    COLD_START["first_request_s"] = first_request_s
    try:
        app: App = default_app()
    except ServingError:
        pass
    else:
        COLD_START.update(app.manager.timings)
        COLD_START["models"] = {
            f"{name}/{number}": dict(version.timings)
            for name, served in app.manager.models.items()
            for number, version in served.versions.items()
        }
    sys.stdout.write(orjson.dumps({"ov_serverless_cold_start": COLD_START}).decode() + "\n")
    sys.stdout.flush()
