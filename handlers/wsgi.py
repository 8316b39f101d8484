"""WSGI front for the router (long-running REST under gunicorn)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qsl

from core.api import App, Request, Response, error_response
from core.errors import InvalidInputError, PayloadTooLargeError, RequestTimeoutError

StartResponse = Callable[[str, list[tuple[str, str]]], Any]

_REASONS = {200: "OK", 201: "Created", 204: "No Content", 400: "Bad Request",
            404: "Not Found", 405: "Method Not Allowed", 406: "Not Acceptable",
            408: "Request Timeout",
            409: "Conflict", 412: "Precondition Failed", 413: "Payload Too Large",
            415: "Unsupported Media Type", 500: "Internal Server Error",
            502: "Bad Gateway", 503: "Service Unavailable"}


def to_request(environ: dict[str, Any], max_bytes: int) -> Request:
    headers = {key[5:].replace("_", "-").lower(): value
               for key, value in environ.items() if key.startswith("HTTP_")}
    for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(key):
            headers[key.replace("_", "-").lower()] = environ[key]
    length_text = environ.get("CONTENT_LENGTH") or "0"
    if not length_text.isdigit():
        raise InvalidInputError("Invalid Content-Length header")
    length = int(length_text)
    if length > max_bytes:  # refuse before reading the body into memory
        raise PayloadTooLargeError(
            f"Request body of {length} bytes exceeds the limit of {max_bytes} bytes"
        )
    try:
        body = environ["wsgi.input"].read(length) if length else b""
    except TimeoutError:  # handlers.rest_worker's socket timeout: the client stalled
        raise RequestTimeoutError(
            "Request body not received in time (--rest_read_timeout_seconds)") from None
    query = dict(parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True))
    return Request(environ["REQUEST_METHOD"], environ.get("PATH_INFO") or "/", query, headers,
                   body)


def make_wsgi_app(app: App) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    def wsgi(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        try:
            response = app.handle(to_request(environ, app.settings.max_request_bytes))
        except (InvalidInputError, PayloadTooLargeError, RequestTimeoutError) as exc:
            response = error_response(exc)
        start_response(_status_line(response), _header_list(response))
        return [response.body]

    return wsgi


def _status_line(response: Response) -> str:
    return f"{response.status} {_REASONS.get(response.status, 'Unknown')}"


def _header_list(response: Response) -> list[tuple[str, str]]:
    headers = [(name.title(), value) for name, value in response.headers.items()]
    headers.append(("Content-Length", str(len(response.body))))
    return headers
