"""Azure Functions (Python v2 programming model): one catch-all HTTP route for the router.

`infra/azure/function_app.py` re-exports `app`. With host.json `"routePrefix": ""` the
function serves /v1/... and /v2/... directly; the path comes from the `{*path}` route
parameter, so another routePrefix works too. Auth level: env OVS_AZURE_AUTH_LEVEL
(ANONYMOUS | FUNCTION | ADMIN, default ANONYMOUS). Binary bodies pass through as bytes with
their content-type. The App is built at import (worker indexing) unless OVS_LAZY_LOAD is set.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import azure.functions as func

from core.api import default_app, error_response, make_request
from core.config import Settings
from core.errors import ConfigError, ServingError


def _auth_level() -> func.AuthLevel:
    name = os.environ.get("OVS_AZURE_AUTH_LEVEL", "ANONYMOUS").upper()
    try:
        return func.AuthLevel[name]
    except KeyError:
        raise ConfigError(f"OVS_AZURE_AUTH_LEVEL: expected ANONYMOUS, FUNCTION or ADMIN, "
                          f"got {name!r}") from None


SETTINGS = Settings.from_env()
app = func.FunctionApp(http_auth_level=_auth_level())
if not SETTINGS.lazy_load:
    default_app()


@app.route(route="{*path}", methods=list(func.HttpMethod))
def serve(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    if "path" in req.route_params:
        path = "/" + (req.route_params["path"] or "")
    else:
        path = urlsplit(req.url).path or "/"
    try:
        response = default_app().handle(make_request(
            req.method, path, req.get_body(), dict(req.headers), dict(req.params),
            context.invocation_id))
    except ServingError as exc:
        response = error_response(exc)
    content_type = response.headers.get("content-type", "application/octet-stream")
    return func.HttpResponse(response.body, status_code=response.status,
                             headers=dict(response.headers),
                             mimetype=content_type.split(";")[0])
