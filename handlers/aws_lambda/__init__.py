"""AWS Lambda entry point: `handlers.aws_lambda.handler(event, context)`.

The event's shape picks its source (handlers.aws_lambda.sources, Mangum-style); the source
turns the event into a request for the core router and the router's response into the
source's reply, within the source's payload limit and OVS_MAX_REQUEST_BYTES. OVS_BASE_PATH is
stripped by the core router.

Warm state: `build()` makes a `LambdaHandler` for this execution environment: it reads the
settings, sets up logging (JSON lines at OVS_LOG_LEVEL), builds the App (compiled models) unless
OVS_LAZY_LOAD is set (then on the first invocation), and registers the SnapStart hooks. The
module attribute `handler` is that object, built on its first lookup: the Lambda bootstrap looks
it up right after importing this module, in the init phase, so the models compile before the
first request while importing the package (or its `sources`) does no work. When the App cannot
be built (no models configured, a malformed OVS_* value), the init still succeeds and every
invocation answers 503 with the reason (handlers.startup). The first invocation of an instance
prints one JSON line with the cold-start breakdown (`LambdaHandler.cold_start` holds the same
dict).
"""

from __future__ import annotations

import time

_IMPORT_STARTED = time.perf_counter()

import sys  # noqa: E402
from dataclasses import replace  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

import orjson  # noqa: E402

from core.api import App, Response, default_app, error_response  # noqa: E402
from core.config import Settings  # noqa: E402
from core.errors import ServingError  # noqa: E402
from handlers import startup  # noqa: E402
from handlers.aws_lambda.sources import Event, Source, detect, headers  # noqa: E402

_IMPORT_S = time.perf_counter() - _IMPORT_STARTED


class LambdaHandler:
    """The Lambda handler of one execution environment: translates each event through its
    source and the process-wide App, and logs the cold-start record on the first call."""

    def __init__(self, settings: Settings, cold_start: dict[str, Any]) -> None:
        self.settings = settings
        self.cold_start = cold_start
        self._cold = True

    def __call__(self, event: Any, context: Any) -> Event:
        source = detect(event)
        started = time.perf_counter()
        try:
            app = startup.app()
        except ServingError as exc:
            return source.reply(event, error_response(exc))
        try:
            request = source.request(event, source.limit(app.settings.max_request_bytes))
            rid = str(getattr(context, "aws_request_id", "") or "")
            response = app.handle(replace(request, request_id=rid))
        except ServingError as exc:  # an event that is no request (a body over the limit)
            response = _refuse(app, exc, source, event)
        if self._cold:
            self._cold = False
            self._log_cold_start(context, time.perf_counter() - started)
        reply = source.reply(event, response)
        too_large = source.reply_too_large(reply)
        if too_large is not None:
            reply = source.reply(event, _refuse(app, too_large, source, event))
        return reply

    def _log_cold_start(self, context: Any, first_request_s: float) -> None:
        cold = self.cold_start
        cold["request_id"] = getattr(context, "aws_request_id", None)
        cold["first_request_s"] = first_request_s
        try:
            app: App = default_app()
        except ServingError:
            pass
        else:
            cold.update(app.manager.timings)
            cold["models"] = {
                f"{name}/{number}": dict(version.timings)
                for name, served in app.manager.models.items()
                for number, version in served.versions.items()
            }
        sys.stdout.write(orjson.dumps({"ov_serverless_cold_start": cold}).decode() + "\n")
        sys.stdout.flush()


def _refuse(app: App, exc: ServingError, source: Source, event: Any) -> Response:
    """The answer to an event the router never saw: the shape of the route its path names
    (OpenAI's under /v3), with CORS."""
    return app.refuse(exc.http_status, exc.message, source.path_of(event), headers(event))


def build() -> LambdaHandler:
    """The init phase, from the environment: settings, logging, the App (unless
    OVS_LAZY_LOAD), SnapStart hooks. Never raises for a misconfiguration (see
    handlers.startup)."""
    cold_start: dict[str, Any] = {"import_s": _IMPORT_S}
    started = time.perf_counter()
    settings = startup.settings()
    startup.configure_logging(settings.log_level)
    cold_start["config_s"] = time.perf_counter() - started
    cold_start["lazy_load"] = settings.lazy_load
    if not settings.lazy_load:
        started = time.perf_counter()
        startup.preload()  # compile in the init phase: the first request only infers
        cold_start["init_s"] = time.perf_counter() - started
    from handlers import snapstart  # its hooks run only under SnapStart

    snapstart.register(cold_start)
    return LambdaHandler(settings, cold_start)


if TYPE_CHECKING:
    handler: LambdaHandler


def __getattr__(name: str) -> LambdaHandler:
    """`handler`, built once on its first lookup (the bootstrap's, in the init phase)."""
    if name != "handler":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    built = globals()["handler"] = build()  # later lookups find it in the module
    return built
