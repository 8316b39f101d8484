"""What each serverless entry point (Lambda, functions-framework, Azure) does once per instance.

The log level comes from OVS_LOG_LEVEL. The App is built from the environment; when that fails
(no models configured, a malformed OVS_* value, an unreadable config), importing the handler
still succeeds and every request answers 503 with the reason, which names the setting to fix:
the platform sees a running instance with a clear error, not an init crash loop.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any, TextIO

from core import logs
from core.api import App, default_app
from core.config import Settings
from core.errors import ConfigError, ServerNotReadyError, ServingError

log = logging.getLogger("ov_serverless.startup")

# An absolute local path inside a message (not the path part of a URL): its last part only.
_LOCAL_PATH = re.compile(r"(?<![\w:/.~-])/(?:[\w.@+-]+/)+([\w.@+-]+)")


def settings() -> Settings:
    """The environment's settings, or the defaults when a value is malformed (the App's
    build then fails with that message, and requests answer it)."""
    try:
        return Settings.from_env()
    except ServingError:
        return Settings()


class _Stderr(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time of each record."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def configure_logging(level: str, keep_handlers: bool = False) -> None:
    """Every logger at `level` (OVS_LOG_LEVEL), as JSON lines on stderr; with keep_handlers
    (Azure, whose worker forwards the root logger's records to the host) only the level."""
    name = level.strip().upper()
    valid = name in logs.LEVELS
    root = logging.getLogger()
    root.setLevel("DEBUG" if name == "TRACE" else name if valid else "INFO")
    if not keep_handlers:
        handler = _Stderr()
        handler.setFormatter(logs.JsonFormatter())
        root.handlers[:] = [handler]
        logging.captureWarnings(True)
    if not valid:
        log.warning("OVS_LOG_LEVEL %r is not one of %s: INFO", level, ", ".join(logs.LEVELS))


def app() -> App:
    """The process-wide App; a build failure raises ServerNotReadyError (503) with its reason."""
    try:
        return default_app()
    except ServingError as exc:
        raise unavailable(exc) from exc


def preload() -> None:
    """Build the App now (the platform's init phase); a failure is logged and left for the
    requests to answer."""
    try:
        app()
    except ServerNotReadyError as exc:
        log.error("Not serving: %s", exc.message)


def unavailable(exc: ServingError) -> ServerNotReadyError:
    if isinstance(exc, ServerNotReadyError):
        return exc
    reason = _LOCAL_PATH.sub(r"\1", exc.message)
    what = "Misconfigured" if isinstance(exc, ConfigError) else "Models not loaded"
    return ServerNotReadyError(f"{what}: {reason}")
