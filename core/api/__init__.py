"""The fronts' door: handlers (Lambda, Cloud Run, Azure, the long-running server) build a
`Request`, call `App.handle` (router.py: the URL scheme and the routes -> the data plane) and
translate the `Response` back (messages.py). Nothing else in the product parses URLs.
"""

from __future__ import annotations

import threading

from core.api.messages import (
    JSON,
    Request,
    Response,
    error_response,
    make_request,
    reason_phrase,
    refusal,
)
from core.api.router import App
from core.config import Settings
from core.serving.registry import ModelManager

__all__ = [
    "JSON",
    "App",
    "Request",
    "Response",
    "default_app",
    "error_response",
    "make_request",
    "reason_phrase",
    "refusal",
]

_default_app: App | None = None
_default_lock = threading.Lock()


def default_app() -> App:
    """The process-wide App built from the environment; a warm instance reuses it (and its
    compiled models) for every invocation."""
    global _default_app
    if _default_app is None:
        with _default_lock:
            if _default_app is None:
                settings = Settings.from_env()
                _default_app = App(ModelManager.start(settings), settings)
    return _default_app
