"""Azure Functions (Python v2 programming model): one catch-all HTTP route for the router.

`infra/azure/function_app.py` re-exports `app`. With host.json `"routePrefix": ""` the
function serves /v1/... and /v2/... directly; the path comes from the `{*path}` route
parameter, so another routePrefix works too. Auth level: env OVS_AZURE_AUTH_LEVEL
(ANONYMOUS | FUNCTION | ADMIN, default ANONYMOUS). Binary bodies pass through as bytes with
their content-type. The App is built at import (worker indexing) unless OVS_LAZY_LOAD is set.
A failure there (no models configured, a bad OVS_* value, an unknown auth level) never stops
the indexing: the function registers and every request answers 503 with the reason (an unknown
OVS_AZURE_AUTH_LEVEL registers it at ADMIN, the strictest level). OVS_LOG_LEVEL sets the level
of the root logger, whose records the worker forwards to the host.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import azure.functions as func

from core.api import Response, error_response, make_request
from core.errors import ServerNotReadyError, ServingError
from handlers import startup


def _auth_level() -> tuple[func.AuthLevel, ServingError | None]:
    name = os.environ.get("OVS_AZURE_AUTH_LEVEL", "ANONYMOUS").upper()
    try:
        return func.AuthLevel[name], None
    except KeyError:
        return func.AuthLevel.ADMIN, ServerNotReadyError(
            f"Misconfigured: OVS_AZURE_AUTH_LEVEL: expected ANONYMOUS, FUNCTION or ADMIN, "
            f"got {name[:40]!r}")


SETTINGS = startup.settings()
startup.configure_logging(SETTINGS.log_level, keep_handlers=True)
AUTH_LEVEL, AUTH_ERROR = _auth_level()
app = func.FunctionApp(http_auth_level=AUTH_LEVEL)
if not SETTINGS.lazy_load and AUTH_ERROR is None:
    startup.preload()


def _handle(req: func.HttpRequest, path: str, context: func.Context) -> Response:
    if AUTH_ERROR is not None:
        return error_response(AUTH_ERROR)
    return startup.app().handle(make_request(
        req.method, path, req.get_body(), dict(req.headers), dict(req.params),
        context.invocation_id))


@app.route(route="{*path}", methods=list(func.HttpMethod))
def serve(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    if "path" in req.route_params:
        path = "/" + (req.route_params["path"] or "")
    else:
        path = urlsplit(req.url).path or "/"
    try:
        response = _handle(req, path, context)
    except ServingError as exc:
        response = error_response(exc)
    content_type = response.headers.get("content-type", "application/octet-stream")
    return func.HttpResponse(response.body, status_code=response.status,
                             headers=dict(response.headers),
                             mimetype=content_type.split(";")[0])
