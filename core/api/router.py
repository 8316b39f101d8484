"""The one router that knows the URL scheme: each route translates a Request into a data plane
call (core.dataplane) and its answer into a Response; every failure becomes the OVMS error
shape (the OpenAI one on the OpenAI routes), never an exception."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping

from core import dataplane, errors, logs
from core.api.messages import (
    READY,
    MethodNotAllowed,
    Request,
    Response,
    error_response,
    json_response,
    not_ready,
    refusal,
)
from core.codecs import documents, kserve_rest, tfs_rest
from core.codecs.json import dumps
from core.config import Settings
from core.cors import Cors
from core.dataplane import DataPlane
from core.serving.registry import ModelManager

log = logging.getLogger("ov_serverless.api")
Handler = Callable[[Request, re.Match[str]], Response]

_NAME = r"(?P<name>[^/:]+)"
_VERSION = r"(?:/versions/(?P<version>[0-9]+))?"
_LABEL = r"(?:/labels/(?P<label>[^/:]+))?"
_OPENAI = r"/(?:v3/(?:v1/)?|v1/)"  # OVMS serves its OpenAI API under /v3, /v3/v1 and /v1
_OPENAI_V1 = re.compile(r"/v1/(?:embeddings|rerank|tokenize|models)")  # the rest is TF Serving's


class App:
    """The REST front every transport shares: routes -> the data plane, replies in JSON."""

    def __init__(self, manager: ModelManager, settings: Settings) -> None:
        self.manager = manager
        self.plane = DataPlane(manager, "REST", settings.limits)
        self.settings = settings
        self._cors = Cors(settings.cors)
        self._routes: list[tuple[re.Pattern[str], dict[str, Handler]]] = [
            (
                re.compile(r"/v1/models/" + _NAME + _VERSION + _LABEL + r":predict"),
                {"POST": self._tfs_predict},
            ),
            (
                re.compile(r"/v1/models/" + _NAME + _VERSION + _LABEL + r":(?:classify|regress)"),
                {"POST": self._unsupported_verb},
            ),
            (
                re.compile(r"/v1/models/" + _NAME + _VERSION + _LABEL + r"/metadata"),
                {"GET": self._tfs_metadata},
            ),
            (re.compile(r"/v1/models/" + _NAME + _VERSION + _LABEL), {"GET": self._tfs_status}),
            (re.compile(r"/v1/config"), {"GET": self._config_status}),
            (re.compile(r"/v1/config/reload"), {"POST": self._config_reload}),
            (re.compile(r"/v2/health/live"), {"GET": self._live}),
            (re.compile(r"/v2/health/ready"), {"GET": self._ready}),
            (re.compile(r"/v2/?"), {"GET": self._server_metadata}),
            (re.compile(r"/v2/models/" + _NAME + _VERSION), {"GET": self._kserve_metadata}),
            (
                re.compile(r"/v2/models/" + _NAME + _VERSION + r"/ready"),
                {"GET": self._kserve_ready},
            ),
            (
                re.compile(r"/v2/models/" + _NAME + _VERSION + r"/infer"),
                {"POST": self._kserve_infer},
            ),
            # OpenAI API (core.openai); /v1/models/{name} stays TF Serving's status route
            (re.compile(_OPENAI + r"embeddings"), {"POST": self._openai_embeddings}),
            (re.compile(_OPENAI + r"rerank"), {"POST": self._openai_rerank}),
            # cohere.ClientV2 with base_url .../v3 posts there; OVMS routes any /v3 path by model
            (re.compile(r"/v3/v2/rerank"), {"POST": self._openai_rerank}),
            (re.compile(_OPENAI + r"tokenize"), {"POST": self._openai_tokenize}),
            (re.compile(_OPENAI + r"models"), {"GET": self._openai_models}),
            (re.compile(r"/v3/(?:v1/)?models/" + _NAME), {"GET": self._openai_model}),
        ]

    def handle(self, request: Request) -> Response:
        """Answer one request; every failure becomes the OVMS error shape, never an exception."""
        logs.request_id.set(request.request_id or request.header("x-request-id")[:128])
        started = time.perf_counter()
        preflight = self._cors.enabled and Cors.is_preflight(
            request.method.upper(), request.headers
        )
        response = Response(204, b"", {}) if preflight else self._answer(request)
        response = self.finish(response, request.headers, preflight)
        if log.isEnabledFor(logging.DEBUG):  # never the body: sizes and status only
            log.debug(
                "request",
                extra={
                    "method": request.method[:16],
                    "path": request.path[:200],
                    "status": response.status,
                    "request_bytes": len(request.body),
                    "response_bytes": len(response.body),
                    "duration_ms": round((time.perf_counter() - started) * 1e3, 3),
                },
            )
        return response

    def refuse(
        self, status: int, message: str, path: str = "", headers: Mapping[str, str] | None = None
    ) -> Response:
        """An answer a front makes itself, before or instead of `handle` (a body over the
        limit refused from its Content-Length, a framing error, a timeout): the error shape of
        the route `path` names (OpenAI's under /v3), with the CORS headers for the request's
        (lower-case) `headers`. `path` is "" when the request line could not be read."""
        response = refusal(status, message, self._is_openai(path))
        return self.finish(response, headers or {})

    def finish(
        self, response: Response, request_headers: Mapping[str, str], preflight: bool = False
    ) -> Response:
        """The response with its CORS headers."""
        extra = self._cors.headers(request_headers, preflight)
        return (
            Response(response.status, response.body, {**response.headers, **extra})
            if extra
            else response
        )

    def _answer(self, request: Request) -> Response:
        try:
            self.manager.reload_if_due()
            if len(request.body) > self.settings.max_request_bytes:
                raise errors.PayloadTooLargeError(
                    f"Request body of {len(request.body)} bytes exceeds the limit of "
                    f"{self.settings.max_request_bytes} bytes"
                )
            handler, match = self._route(request.method.upper(), request.path)
            return handler(request, match)
        except errors.ServingError as exc:
            return error_response(exc, self._is_openai(request.path))
        except Exception as exc:  # a bug must not take the server down; report it as 500
            log.exception("Unhandled error for %s %s", request.method[:16], request.path[:200])
            return error_response(
                errors.InternalError(f"Internal server error: {type(exc).__name__}"),
                self._is_openai(request.path),
            )

    def _is_openai(self, path: str) -> bool:
        """A path of the OpenAI API: anything under /v3 (OVMS's OpenAI prefix, known route or
        not) and the OpenAI routes under /v1. Its errors take the OpenAI shape."""
        path = self._strip(path)
        return path == "/v3" or path.startswith("/v3/") or _OPENAI_V1.fullmatch(path) is not None

    def _strip(self, path: str) -> str:
        prefix = self.settings.base_path
        if prefix and (path == prefix or path.startswith(prefix + "/")):
            return path[len(prefix) :] or "/"
        return path

    def _route(self, method: str, request_path: str) -> tuple[Handler, re.Match[str]]:
        path = self._strip(request_path)
        if len(path) > 2048 or "\x00" in path or ".." in path:
            raise errors.InvalidInputError("Invalid request URL")
        found = _match(self._routes, method, path) or _match(self._metrics_route(), method, path)
        if found is None:  # OpenAI's API words it so, OVMS's REST API so
            raise errors.RouteNotFoundError(
                f"Invalid URL ({method[:16]} {path})"
                if self._is_openai(request_path)
                else f"Invalid request URL: {path}"
            )
        return found

    def _metrics_route(self) -> list[tuple[re.Pattern[str], dict[str, Handler]]]:
        """The configured metrics path (a reload may change it); none unless enabled, as OVMS."""
        metrics = self.manager.metrics
        return (
            [(re.compile(re.escape(metrics.path)), {"GET": self._metrics})]
            if metrics.enabled
            else []
        )

    # Each route translates: URL and body in, the data plane's answer out as JSON.

    def _tfs_predict(self, req: Request, m: re.Match[str]) -> Response:
        return json_response(
            self.plane.infer(
                dataplane.TFS_PREDICT, m["name"], _ver(m), tfs_rest.PredictCall(req.body)
            )
        )

    def _unsupported_verb(self, req: Request, m: re.Match[str]) -> Response:
        raise errors.RouteNotFoundError("Only :predict is served; classify and regress are not")

    def _tfs_metadata(self, req: Request, m: re.Match[str]) -> Response:
        doc = self.plane.tfs_metadata(dataplane.TFS_METADATA, m["name"], _ver(m))
        return json_response(dumps(doc))

    def _tfs_status(self, req: Request, m: re.Match[str]) -> Response:
        doc = self.plane.model_status(dataplane.TFS_STATUS, m["name"], _ver(m))
        return json_response(dumps(doc))

    def _config_status(self, req: Request, m: re.Match[str]) -> Response:
        return json_response(dumps(self.plane.config_status()))

    def _config_reload(self, req: Request, m: re.Match[str]) -> Response:
        changed = self.plane.reload()
        return json_response(dumps(self.plane.config_status()), 201 if changed else 200)

    # Health bodies as the Open Inference Protocol REST spec shapes them; a not-ready answer
    # also carries the reason in the error shape every other failure uses.

    def _live(self, req: Request, m: re.Match[str]) -> Response:
        return json_response(b'{"live":true}')

    def _ready(self, req: Request, m: re.Match[str]) -> Response:
        if not self.plane.ready:
            return not_ready(errors.ServerNotReadyError("Server is not ready yet"))
        return json_response(READY)

    def _server_metadata(self, req: Request, m: re.Match[str]) -> Response:
        return json_response(dumps(documents.server_metadata()))

    def _kserve_metadata(self, req: Request, m: re.Match[str]) -> Response:
        return json_response(
            dumps(self.plane.kserve_metadata(dataplane.KSERVE_METADATA, m["name"], _ver(m)))
        )

    def _kserve_ready(self, req: Request, m: re.Match[str]) -> Response:
        problem = self.plane.model_ready(dataplane.KSERVE_READY, m["name"], _ver(m))
        if problem is None:
            return json_response(READY)
        if isinstance(problem, errors.NotFoundError):  # no such model or version
            return error_response(problem)
        return not_ready(problem)

    def _kserve_infer(self, req: Request, m: re.Match[str]) -> Response:
        header_length = req.header("inference-header-content-length") or None
        body, headers = self.plane.infer(
            dataplane.KSERVE_INFER,
            m["name"],
            _ver(m),
            kserve_rest.InferCall(req.body, header_length),
        )
        return Response(200, body, headers)

    def _openai_embeddings(self, req: Request, m: re.Match[str]) -> Response:
        from core.codecs import openai  # loaded by the first OpenAI call, not at start

        return json_response(self.plane.embeddings(openai.EmbeddingsCall(req.body)))

    def _openai_rerank(self, req: Request, m: re.Match[str]) -> Response:
        from core.codecs import openai

        return json_response(self.plane.rerank(openai.RerankCall(req.body)))

    def _openai_tokenize(self, req: Request, m: re.Match[str]) -> Response:
        from core.codecs import openai

        return json_response(self.plane.tokenize(openai.TokenizeCall(req.body)))

    def _openai_models(self, req: Request, m: re.Match[str]) -> Response:
        from core.codecs import openai

        return json_response(openai.model_list(self.plane.listed_models(), int(time.time())))

    def _openai_model(self, req: Request, m: re.Match[str]) -> Response:
        from core.codecs import openai

        name = self.plane.listed_model(m["name"])
        return json_response(openai.model_info(name, int(time.time())))

    def _metrics(self, req: Request, m: re.Match[str]) -> Response:
        from core import metrics

        body, content_type = metrics.exposition(self.manager, self.manager.metrics.families)
        return Response(200, body, {"content-type": content_type})


def _match(
    routes: list[tuple[re.Pattern[str], dict[str, Handler]]], method: str, path: str
) -> tuple[Handler, re.Match[str]] | None:
    """The handler of the first pattern matching `path`; 405 when it lacks `method`. HEAD is
    answered as GET (the transport sends the head without the body)."""
    for pattern, methods in routes:
        match = pattern.fullmatch(path)
        if match is None:
            continue
        handler = methods.get("GET" if method == "HEAD" else method)
        if handler is None:
            raise MethodNotAllowed(method, path, _allowed(methods))
        return handler, match
    return None


def _allowed(methods: Mapping[str, Handler]) -> list[str]:
    return [*methods, "HEAD"] if "GET" in methods else list(methods)


def _ver(match: re.Match[str]) -> int | None:
    """Version from the URL; 0 and absent both mean 'the default version', as in OVMS."""
    text = match["version"]
    if text is None:
        return None
    if len(text) > 18:
        raise errors.InvalidInputError(f"Invalid model version: {text[:20]}...")
    return int(text) or None
