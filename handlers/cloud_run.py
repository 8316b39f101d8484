"""Cloud Run / Cloud Run functions entry: a functions-framework HTTP target for the router.

    functions-framework --source=handlers/cloud_run.py --target=predict --port=$PORT

functions-framework owns the HTTP server (gunicorn, one process, threads); every path and
method reaches `predict`, which hands the raw request to the core router. The App (compiled
models) is built at import, before the server accepts traffic, unless OVS_LAZY_LOAD is set.
"""

from __future__ import annotations

import flask
import functions_framework

from core.api import default_app, error_response, make_request
from core.config import Settings
from core.errors import PayloadTooLargeError, ServingError

SETTINGS = Settings.from_env()
if not SETTINGS.lazy_load:
    default_app()


@functions_framework.http
def predict(request: flask.Request) -> tuple[bytes, int, dict[str, str]]:
    try:
        app = default_app()
        limit = app.settings.max_request_bytes
        if (request.content_length or 0) > limit:  # refuse before reading the body
            raise PayloadTooLargeError(f"Request body of {request.content_length} bytes "
                                       f"exceeds the limit of {limit} bytes")
        response = app.handle(make_request(
            request.method, request.path, request.get_data(cache=False),
            dict(request.headers), request.args.to_dict(), _request_id(request)))
    except ServingError as exc:
        response = error_response(exc)
    return response.body, response.status, dict(response.headers)


def _request_id(request: flask.Request) -> str:
    """The trace id Cloud Run puts on every request, else functions-framework's execution id."""
    trace = request.headers.get("X-Cloud-Trace-Context", "").split("/", 1)[0]
    return trace or request.headers.get("Function-Execution-Id", "")
