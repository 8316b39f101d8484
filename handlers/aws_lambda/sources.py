"""Lambda event sources: one class per family, chosen by the event's shape (first match wins).

    ALB target group         requestContext.elb      reply: statusDescription, and
                                                     multiValueHeaders iff the event had them
    HTTP API / Function URL  version == "2.0"        reply: payload 2.0
    REST API (payload 1.0)   httpMethod              reply: headers + multiValueHeaders
    direct Invoke            anything else           reply: {statusCode, headers, body,
                                                     isBase64Encoded}

Each source turns its event into a `core.api.Request` and a `core.api.Response` into its reply,
and knows its payload limit: an ALB target group passes at most 1 MB of request body and of
response JSON, the others Lambda's 6 MB synchronous payload each way. A request body over the
limit raises PayloadTooLargeError (413) naming the limit and the source, checked before a
base64 body is decoded. Binary responses (`Response.is_binary`) go back base64 with
`isBase64Encoded: true`. The API Gateway stage is stripped from the path when the path still
carries it. The router gets the path percent-decoded once, as `serve` decodes a request line:
REST APIs, Function URLs and ALBs send it as the client encoded it, HTTP APIs (payload 2.0
and 1.0) decoded already. An event with a field of the wrong type (a hand-written one: no
platform sends it) raises InvalidInputError (400) naming the source, never another exception.

Pure translation: importing this module reads no environment and loads no model.
"""

from __future__ import annotations

import base64
import binascii
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, unquote_plus

import orjson

from core.api import Request, Response, make_request, reason_phrase
from core.errors import InvalidInputError, PayloadTooLargeError

Event = dict[str, Any]

MB = 1024 * 1024
LAMBDA_PAYLOAD = 6 * MB  # synchronous invoke: request and response payload
ALB_PAYLOAD = 1 * MB  # ALB target group: request body, and response JSON
# what reading a hand-written event's field of the wrong type raises
_MALFORMED = (AttributeError, TypeError, KeyError, ValueError)


@dataclass(frozen=True)
class Limit:
    """A request body limit and the source it belongs to, for the 413's message."""

    size: int
    source: str


class Source(ABC):
    """An event source family. `matches` recognizes its events; `request` and `reply`
    translate; `kind` names its events and `label` its limit in messages; `payload` is its
    platform limit in bytes."""

    kind: str
    label: str
    payload = LAMBDA_PAYLOAD

    @staticmethod
    @abstractmethod
    def matches(event: Any) -> bool:
        """True when `event` has this source's shape."""

    def request(self, event: Any, limit: Limit) -> Request:
        """The request for the core router; a body over `limit` raises PayloadTooLargeError
        and an event that is no request, or has a field of the wrong type, InvalidInputError."""
        try:
            return self.translate(event, limit)
        except _MALFORMED:
            raise InvalidInputError(
                f"Malformed {self.kind} event: a field is missing or of the wrong type"
            ) from None

    @abstractmethod
    def translate(self, event: Any, limit: Limit) -> Request:
        """`request` for a well-formed event; a field of the wrong type may raise anything."""

    @abstractmethod
    def path(self, event: Any) -> str:
        """The request's path, as `translate` gives it to the router."""

    def path_of(self, event: Any) -> str:
        """`path`, or "" for an event without a readable one: the shape of an answer made
        without the router (a body over the limit) follows it."""
        try:
            path = self.path(event)
        except _MALFORMED:
            return ""
        return path if isinstance(path, str) else ""  # a hand-written event's number

    def reply(self, event: Any, response: Response) -> Event:
        """The reply the platform expects for `event`; a binary body goes base64."""
        body, encoded = _reply_body(response)
        return {
            "statusCode": response.status,
            "headers": dict(response.headers),
            "body": body,
            "isBase64Encoded": encoded,
        }

    def limit(self, configured: int) -> Limit:
        """The request body limit: OVS_MAX_REQUEST_BYTES (`configured`) or the platform's,
        whichever is smaller."""
        if configured < self.payload:
            return Limit(configured, f"OVS_MAX_REQUEST_BYTES, {self.label}")
        return Limit(self.payload, self.label)

    def reply_too_large(self, reply: Event) -> PayloadTooLargeError | None:
        """The error to answer instead of `reply` when its JSON exceeds the platform's limit
        (the platform would drop it for a bare 502), else None."""
        size = len(orjson.dumps(reply))
        if size <= self.payload:
            return None
        return PayloadTooLargeError(
            f"Response of {size} bytes exceeds the limit of {self.payload} bytes "
            f"({self.label}): ask for fewer or smaller outputs, or a smaller batch"
        )


class RestV1(Source):
    """API Gateway REST API proxy integration (payload 1.0, also HTTP API payload 1.0)."""

    kind = "API Gateway REST API (payload 1.0)"
    label = f"{kind}, Lambda's 6 MB payload"

    @staticmethod
    def matches(event: Event) -> bool:
        return "httpMethod" in event

    def translate(self, event: Event, limit: Limit) -> Request:
        return make_request(
            event["httpMethod"],
            self.path(event),
            _body(event, limit),
            headers(event),
            self.query(event),
        )

    def path(self, event: Event) -> str:
        # `path` normally lacks the stage (requestContext.path has it); a custom domain mapped
        # without a base path sends both with the stage: strip it only then.
        path: str = event.get("path") or "/"
        context = event.get("requestContext") or {}
        stage = context.get("stage") or "$default"
        if stage != "$default" and path == context.get("path"):
            path = _strip_prefix(path, "/" + stage)
        # A REST API sends the path as the client encoded it; an HTTP API's payload 1.0
        # ("version": "1.0") decoded.
        return path if event.get("version") == "1.0" else unquote(path)

    def query(self, event: Event) -> dict[str, str]:
        multi = event.get("multiValueQueryStringParameters") or {}
        query = dict(event.get("queryStringParameters") or {})
        query.update({key: values[-1] for key, values in multi.items() if values})
        return query

    def reply(self, event: Event, response: Response) -> Event:
        reply = super().reply(event, response)
        reply["multiValueHeaders"] = {k: [v] for k, v in response.headers.items()}
        return reply


class Alb(RestV1):
    """ALB target group, single- or multi-value headers (lambda.multi_value_headers.enabled):
    query values arrive percent-encoded; the reply carries the header form the event had."""

    kind = "ALB target group"
    label = f"{kind}, 1 MB"
    payload = ALB_PAYLOAD

    @staticmethod
    def matches(event: Event) -> bool:
        context = event.get("requestContext")
        return isinstance(context, dict) and "elb" in context

    def path(self, event: Event) -> str:
        return unquote(event.get("path") or "/")  # as the client encoded it

    def query(self, event: Event) -> dict[str, str]:
        return {unquote_plus(k): unquote_plus(v) for k, v in super().query(event).items()}

    def reply(self, event: Event, response: Response) -> Event:
        body, encoded = _reply_body(response)
        reply: Event = {
            "statusCode": response.status,
            "statusDescription": f"{response.status} {reason_phrase(response.status)}",
            "body": body,
            "isBase64Encoded": encoded,
        }
        if "multiValueHeaders" in event:
            reply["multiValueHeaders"] = {k: [v] for k, v in response.headers.items()}
        else:
            reply["headers"] = dict(response.headers)
        return reply


class HttpV2(Source):
    """HTTP API payload 2.0 and Lambda Function URLs."""

    kind = "HTTP API / Function URL (payload 2.0)"
    label = f"{kind}, Lambda's 6 MB payload"

    @staticmethod
    def matches(event: Event) -> bool:
        return event.get("version") == "2.0"

    def translate(self, event: Event, limit: Limit) -> Request:
        context = event.get("requestContext") or {}
        head = headers(event)
        if event.get("cookies"):
            head["cookie"] = "; ".join(event["cookies"])
        query = dict(parse_qsl(event.get("rawQueryString") or "", keep_blank_values=True))
        method = (context.get("http") or {}).get("method", "GET")
        return make_request(method, self.path(event), _body(event, limit), head, query)

    def path(self, event: Event) -> str:
        context = event.get("requestContext") or {}
        path: str = event.get("rawPath") or "/"
        stage = context.get("stage") or "$default"
        if stage != "$default":  # a named stage is part of rawPath
            path = _strip_prefix(path, "/" + stage)
        if ".lambda-url." in (context.get("domainName") or ""):
            path = unquote(path)  # a Function URL sends it encoded, an HTTP API decoded
        return path


class DirectInvoke(Source):
    """`aws lambda invoke` with a small HTTP request: {"path": "/v1/models/m:predict",
    "method": "POST", "headers": {...}, "query": {...}, "body": "<text>" or a JSON value,
    "isBase64Encoded": false} (method defaults to POST with a body, GET without); the path is
    taken as written, not percent-decoded."""

    kind = "direct Invoke"
    label = f"{kind}, Lambda's 6 MB payload"
    shape = (
        'A direct Invoke event must be {"path": "/v1/models/NAME:predict", "method": "POST", '
        '"headers": {...}, "query": {...}, "body": ...}'
    )

    @staticmethod
    def matches(event: Any) -> bool:
        return True

    def translate(self, event: Any, limit: Limit) -> Request:
        if not isinstance(event, dict) or not isinstance(event.get("path"), str):
            raise InvalidInputError(self.shape)
        for key, wanted, name in (
            ("method", str, "a string"),
            ("headers", dict, "an object"),
            ("query", dict, "an object"),
        ):
            if event.get(key) is not None and not isinstance(event[key], wanted):
                raise InvalidInputError(f"{self.shape}; {key!r} must be {name}")
        body = event.get("body")
        if body is not None and not isinstance(body, str):
            event = {**event, "body": orjson.dumps(body).decode(), "isBase64Encoded": False}
        method = (
            event.get("method") or event.get("httpMethod") or ("GET" if body is None else "POST")
        )
        return make_request(
            method,
            self.path(event),
            _body(event, limit),
            {k.lower(): str(v) for k, v in (event.get("headers") or {}).items()},
            {k: str(v) for k, v in (event.get("query") or {}).items()},
        )

    def path(self, event: Any) -> str:
        path: str = event["path"]  # as written: `translate` checked it is a string
        return path


SOURCES: tuple[Source, ...] = (Alb(), HttpV2(), RestV1(), DirectInvoke())


def detect(event: Any) -> Source:
    """The source of `event`: the first whose shape it has, else a direct Invoke."""
    if isinstance(event, dict):
        for source in SOURCES:
            if source.matches(event):
                return source
    return SOURCES[-1]


def headers(event: Any) -> dict[str, str]:
    """The event's single- and multi-value header maps merged, names lower-cased, repeated
    values comma-joined ({} for an event that is no dict)."""
    if not isinstance(event, dict):
        return {}
    merged = {str(k).lower(): str(v) for k, v in _mapping(event.get("headers")).items()}
    for key, values in _mapping(event.get("multiValueHeaders")).items():
        if values and isinstance(values, list):
            merged[str(key).lower()] = ",".join(map(str, values))
    return merged


def _mapping(value: Any) -> dict[Any, Any]:
    """`value` when it is a JSON object, else {} (null, or a hand-written event's mistake)."""
    return value if isinstance(value, dict) else {}


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
            raise InvalidInputError(
                "Event body is flagged isBase64Encoded but is not base64"
            ) from None
    _check_size(len(text), limit)  # characters <= utf-8 bytes: no encoding before the check
    return text.encode()


def _check_size(size: int, limit: Limit) -> None:
    if size > limit.size:
        raise PayloadTooLargeError(
            f"Request body of {size} bytes exceeds the limit of {limit.size} bytes ({limit.source})"
        )


def _reply_body(response: Response) -> tuple[str, bool]:
    if response.is_binary:
        return base64.b64encode(response.body).decode("ascii"), True
    return response.body.decode("utf-8", "replace"), False


def _strip_prefix(path: str, prefix: str) -> str:
    if path == prefix or path.startswith(prefix + "/"):
        return path[len(prefix) :] or "/"
    return path
