"""Cloud Run / Cloud Run functions entry: a functions-framework HTTP target for the router.

    functions-framework --source=handlers/cloud_run.py --target=predict --port=$PORT

functions-framework owns the HTTP server (gunicorn: an arbiter that imports this module, then
forks one worker with THREADS threads); every path and method reaches `predict`, which hands
the raw request to the core router. The App (compiled models) is built in the worker, right
after the fork, in the background; a request that comes first waits for it. Built before the
fork, OpenVINO's threads would stay behind in the arbiter: a THROUGHPUT model then hangs in the
worker and a LATENCY one runs on a single core. Without a fork (a test client) the first request
builds it. When it cannot be built (no models configured, a malformed OVS_* value), the
server still starts and every request answers 503 with the reason (handlers.startup). Logs:
JSON lines at OVS_LOG_LEVEL.

functions-framework loads this file (its source) and has no init hook of its own, so loading
it runs `setup()` once: logging, gunicorn's options, the fork hooks. It builds no App.
"""

from __future__ import annotations

import logging
import os
import threading

import flask
import functions_framework

from core.api import Response, error_response, make_request
from core.errors import ServingError
from handlers import startup

log = logging.getLogger("ov_serverless.cloud_run")


def _no_control_socket() -> None:
    """gunicorn 25.1+ starts a control socket server for `gunicornc` (asyncio, in a thread of
    the arbiter) right after it forks the worker: ~30 ms of CPU taken from the worker's first
    compile on a 1-2 vCPU instance, for a socket nobody reaches in a Cloud Run container.
    functions-framework gives gunicorn fixed options, so the default is changed here, before
    functions-framework builds gunicorn's config."""
    try:
        from gunicorn.config import ControlSocketDisable
    except ImportError:  # an older gunicorn, or none (Windows: functions-framework uses flask's)
        return
    ControlSocketDisable.default = True


_forked_by_main_thread = False


def _before_fork() -> None:
    global _forked_by_main_thread
    _forked_by_main_thread = threading.current_thread() is threading.main_thread()


def _load_in_background() -> None:
    """In gunicorn's worker only: the arbiter forks it from its main thread. A library's helper
    thread forks too (OpenVINO's telemetry, with OVS_IMPORT_OVC=1): that child must not fetch
    and compile every model on the instance's two cores while the worker does."""
    if _forked_by_main_thread:
        threading.Thread(target=_load, name="ovs-load", daemon=True).start()


def _load() -> None:
    try:
        startup.preload()  # a ServingError is logged; each request retries and answers it
    except Exception:
        log.exception("Loading the models failed")


def setup() -> None:
    """What loading this module sets up for the process functions-framework serves from."""
    startup.configure_logging(startup.settings().log_level)
    _no_control_socket()
    os.register_at_fork(before=_before_fork, after_in_child=_load_in_background)


@functions_framework.http
def predict(request: flask.Request) -> tuple[bytes, int, dict[str, str]]:
    try:
        app = startup.app()
    except ServingError as exc:
        return _reply(error_response(exc))
    limit = app.settings.max_request_bytes
    if (request.content_length or 0) > limit:  # refuse before reading the body
        message = (
            f"Request body of {request.content_length} bytes exceeds the limit of {limit} bytes"
        )
        headers = {name.lower(): value for name, value in request.headers.items()}
        return _reply(app.refuse(413, message, request.path, headers))
    return _reply(
        app.handle(
            make_request(
                request.method,
                request.path,
                request.get_data(cache=False),
                dict(request.headers),
                request.args.to_dict(),
                _request_id(request),
            )
        )
    )


def _reply(response: Response) -> tuple[bytes, int, dict[str, str]]:
    return response.body, response.status, dict(response.headers)


def _request_id(request: flask.Request) -> str:
    """The trace id Cloud Run puts on every request, else functions-framework's execution id."""
    trace = request.headers.get("X-Cloud-Trace-Context", "").split("/", 1)[0]
    return trace or request.headers.get("Function-Execution-Id", "")


setup()
