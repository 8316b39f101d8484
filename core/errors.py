"""One exception hierarchy for everything a client can be told.

    ServingError                      500 INTERNAL
    ├── InvalidInputError             400 INVALID_ARGUMENT
    │   └── ImageDecodeError          400 INVALID_ARGUMENT
    ├── NoResultsError                204 ABORTED (pipeline demultiplexer gave no items)
    ├── JsonInvalidError              412 FAILED_PRECONDITION (as OVMS answers malformed JSON)
    ├── NotFoundError                 404 NOT_FOUND
    │   ├── ModelNotFoundError
    │   ├── VersionNotFoundError
    │   └── RouteNotFoundError
    ├── ModelNotReadyError            404 UNAVAILABLE (OVMS: "not loaded yet")
    ├── MethodNotAllowedError         405 UNIMPLEMENTED
    ├── RequestTimeoutError           408 DEADLINE_EXCEEDED (body not received in time)
    ├── PayloadTooLargeError          413 RESOURCE_EXHAUSTED
    ├── UnsupportedMediaTypeError     415 INVALID_ARGUMENT
    ├── PreconditionError             412 FAILED_PRECONDITION (reshape, compile)
    ├── ServerNotReadyError           503 UNAVAILABLE
    ├── StorageError                  502 UNAVAILABLE
    ├── ConfigError                   400 INVALID_ARGUMENT (config file or flags)
    └── InternalError                 500 INTERNAL

Each class carries its HTTP status and the *name* of its gRPC status code, so core/ never
imports grpc. REST bodies are `{"error": "..."}` exactly as TF Serving and OVMS return them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

import orjson

MAX_MESSAGE_CHARS = 1024  # grpc-message travels percent-encoded in a 16 KiB header


def shorten(text: str, limit: int = 200) -> str:
    """A client-supplied name as it may appear in a message: bounded, so that a 100 KB
    model name cannot blow up an error (or the gRPC trailer that carries it)."""
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} chars)"


def relative(text: str, folder: str | Path, name: str = ".") -> str:
    """`text` with a server folder written relative, as `name`: `<folder>/x` becomes `x` (or
    `<name>/x`), `<folder>` itself `name`. Both spellings of the folder are replaced, as given
    and resolved. A client never sees the server's absolute paths (the log keeps them); a
    bucket URL leaves the text as it is."""
    given = str(folder).rstrip(os.sep)
    if not given or "://" in given:
        return text
    spellings = sorted({given, str(Path(given).resolve())}, key=len, reverse=True)
    prefix = "" if name == "." else name + os.sep
    for spelling in spellings:
        text = text.replace(spelling + os.sep, prefix)
    for spelling in spellings:
        text = text.replace(spelling, name)
    return text


class ServingError(Exception):
    http_status: ClassVar[int] = 500
    grpc_code: ClassVar[str] = "INTERNAL"

    def __init__(self, message: str) -> None:
        message = shorten(message, MAX_MESSAGE_CHARS)
        super().__init__(message)
        self.message = message

    def to_body(self) -> bytes:
        return orjson.dumps({"error": self.message})


class InvalidInputError(ServingError):
    http_status = 400
    grpc_code = "INVALID_ARGUMENT"


class ImageDecodeError(InvalidInputError):
    pass


class JsonInvalidError(ServingError):
    http_status = 412
    grpc_code = "FAILED_PRECONDITION"


class NoResultsError(ServingError):
    """A dynamic demultiplexer produced nothing (OVMS: 204 / ABORTED)."""

    http_status = 204
    grpc_code = "ABORTED"


class NotFoundError(ServingError):
    http_status = 404
    grpc_code = "NOT_FOUND"


class ModelNotFoundError(NotFoundError):
    def __init__(self, name: str) -> None:
        super().__init__(f"Model with requested name is not found - name: {shorten(name)}")
        self.name = name


class VersionNotFoundError(NotFoundError):
    def __init__(self, name: str, version: int) -> None:
        super().__init__(
            f"Model with requested version is not found - name: {shorten(name)}; version: {version}"
        )


class RouteNotFoundError(NotFoundError):
    pass


class ModelNotReadyError(ServingError):
    http_status = 404
    grpc_code = "UNAVAILABLE"


class MethodNotAllowedError(ServingError):
    http_status = 405
    grpc_code = "UNIMPLEMENTED"


class RequestTimeoutError(ServingError):
    http_status = 408
    grpc_code = "DEADLINE_EXCEEDED"


class PayloadTooLargeError(ServingError):
    http_status = 413
    grpc_code = "RESOURCE_EXHAUSTED"


class UnsupportedMediaTypeError(ServingError):
    http_status = 415
    grpc_code = "INVALID_ARGUMENT"


class PreconditionError(ServingError):
    http_status = 412
    grpc_code = "FAILED_PRECONDITION"


class ServerNotReadyError(ServingError):
    http_status = 503
    grpc_code = "UNAVAILABLE"


class StorageError(ServingError):
    http_status = 502
    grpc_code = "UNAVAILABLE"


class ConfigError(ServingError):
    http_status = 400
    grpc_code = "INVALID_ARGUMENT"


class InternalError(ServingError):
    pass
