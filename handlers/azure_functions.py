"""Azure Functions (Python v2 programming model): one catch-all HTTP route for the router.

`infra/azure/function_app.py` re-exports `app`. With host.json `"routePrefix": ""` the
function serves /v1/... and /v2/... directly; the path comes from the `{*path}` route
parameter, so another routePrefix works too. Auth level: env OVS_AZURE_AUTH_LEVEL
(ANONYMOUS | FUNCTION | ADMIN, default ANONYMOUS). Binary bodies pass through as bytes with
their content-type.

`build()` makes the FunctionApp from the environment and builds the App (compiled models)
unless OVS_LAZY_LOAD is set. The module attribute `app` is that FunctionApp, built on its first
lookup (the worker's indexing, through function_app.py's import), so importing this module does
no work. A failure there (no models configured, a bad OVS_* value, an unknown auth level) never
stops the indexing: the function registers and every request answers 503 with the reason (an
unknown OVS_AZURE_AUTH_LEVEL registers it at ADMIN, the strictest level). OVS_LOG_LEVEL sets the
level of the root logger, whose records the worker forwards to the host.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING
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
            f"got {name[:40]!r}"
        )


def build() -> func.FunctionApp:
    """The worker's indexing, from the environment: logging level, auth level, the App (unless
    OVS_LAZY_LOAD), and the one catch-all route. Never raises for a misconfiguration."""
    settings = startup.settings()
    startup.configure_logging(settings.log_level, keep_handlers=True)
    auth_level, auth_error = _auth_level()
    app = func.FunctionApp(http_auth_level=auth_level)
    if not settings.lazy_load and auth_error is None:
        startup.preload()

    @app.route(route="{*path}", methods=list(func.HttpMethod))
    def serve(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
        if auth_error is not None:
            return _reply(error_response(auth_error))
        return _reply(_handle(req, context))

    return app


def _handle(req: func.HttpRequest, context: func.Context) -> Response:
    if "path" in req.route_params:
        path = "/" + (req.route_params["path"] or "")
    else:
        path = urlsplit(req.url).path or "/"
    try:
        return startup.app().handle(
            make_request(
                req.method,
                path,
                req.get_body(),
                dict(req.headers),
                dict(req.params),
                context.invocation_id,
            )
        )
    except ServingError as exc:
        return error_response(exc)


def _reply(response: Response) -> func.HttpResponse:
    content_type = response.headers.get("content-type", "application/octet-stream")
    return func.HttpResponse(
        response.body,
        status_code=response.status,
        headers=dict(response.headers),
        mimetype=content_type.split(";")[0],
    )


if TYPE_CHECKING:
    app: func.FunctionApp


def __getattr__(name: str) -> func.FunctionApp:
    """`app`, built once on its first lookup (the worker's indexing)."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    built = globals()["app"] = build()  # later lookups find it in the module
    return built
