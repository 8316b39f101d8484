"""Structured logs: one JSON object per line, with the platform's request id when known.

Handlers put the id on the Request (Lambda aws_request_id, Cloud Run trace header, ...);
the router stores it in a context variable that the formatter reads. Payloads are never logged.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import time
from typing import Any

import orjson

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        rid = request_id.get()
        if rid:
            doc["request_id"] = rid
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                doc[key] = value
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


def configure(level: str = "INFO", path: str = "") -> None:
    """Route every logger through one JSON handler on stderr at `level`, and with `path`
    (OVMS's --log_path) the same lines to that file too; OSError when it cannot be opened."""
    name = level.upper()
    if name not in LEVELS:
        raise ValueError(f"log_level should be one of: {', '.join(LEVELS)}")
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if path:
        handlers.append(logging.FileHandler(path, encoding="utf-8"))
    for handler in handlers:
        handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = handlers
    root.setLevel("DEBUG" if name == "TRACE" else name)
    logging.captureWarnings(True)  # warnings.warn (e.g. Pillow's bomb warning) as JSON too
