"""Transport-neutral HTTP messages and the shapes of the answers: every front builds a
`Request`, and sends back a `Response` (JSON, or the OVMS / OpenAI error shape)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from http import HTTPStatus

import orjson

from core import errors

JSON = "application/json"
READY = b'{"ready":true}'


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)  # keys lower-case
    body: bytes = b""
    request_id: str = ""  # the platform's id for this request, for the logs

    def header(self, name: str, default: str = "") -> str:
        return self.headers.get(name.lower(), default)


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=lambda: {"content-type": JSON})

    @property
    def is_binary(self) -> bool:
        """True when the body must travel base64-encoded through JSON-only transports."""
        kind = self.headers.get("content-type", "")
        return not kind.startswith(("application/json", "text/"))


def make_request(
    method: str,
    path: str,
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
    query: Mapping[str, str] | None = None,
    request_id: str = "",
) -> Request:
    return Request(
        method.upper(), path, dict(query or {}), _lower_headers(headers or {}), body, request_id
    )


def _lower_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


class MethodNotAllowed(errors.MethodNotAllowedError):
    """405 with the route's methods, sent in the `Allow` header (RFC 9110 requires it)."""

    def __init__(self, method: str, path: str, allowed: list[str]) -> None:
        super().__init__(
            f"Unsupported method {method[:16]} for {path}; allowed: {', '.join(allowed)}"
        )
        self.allowed = allowed


def json_response(body: bytes, status: int = 200) -> Response:
    return Response(status, body, {"content-type": JSON})


def reason_phrase(status: int) -> str:
    """The standard reason phrase of an HTTP status, for transports that send one."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def error_response(exc: errors.ServingError, openai_shape: bool = False) -> Response:
    headers = {"content-type": JSON}
    if isinstance(exc, MethodNotAllowed):
        headers["allow"] = ", ".join(exc.allowed)
    if openai_shape:
        from core.codecs import openai

        body = openai.error_body(exc)
    else:
        body = exc.to_body()
    return Response(exc.http_status, body, headers)


def refusal(status: int, message: str, openai_shape: bool = False) -> Response:
    """An answer a transport makes itself (a framing error, a timeout, a body over the limit),
    at any status, in the OVMS error shape or the OpenAI one."""
    message = errors.shorten(message, errors.MAX_MESSAGE_CHARS)
    if openai_shape:
        from core.codecs import openai

        body = openai.status_error_body(status, message)
    else:
        body = orjson.dumps({"error": message})
    return Response(status, body, {"content-type": JSON})


def not_ready(exc: errors.ServingError) -> Response:
    """A health answer of false: {"ready": false} with the reason, at the error's status."""
    body = orjson.dumps({"ready": False, "error": exc.message})
    return Response(exc.http_status, body, {"content-type": JSON})
