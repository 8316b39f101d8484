"""Long-running gRPC: TF Serving PredictionService + ModelService, KServe GRPCInferenceService,
grpc.health.v1 (overall "" and one service per model name) and server reflection.

Servicers only translate: each RPC converts with core.codecs.{tfs,kserve}_grpc and calls the
data plane (core.dataplane, shared with REST); a ServingError becomes its gRPC status
(NOT_FOUND, INVALID_ARGUMENT, UNAVAILABLE, ...). Oversized messages are refused by grpc itself
(RESOURCE_EXHAUSTED) from --grpc_max_message_bytes; bytes that are no message of the method are
INVALID_ARGUMENT (ParseRequests).
Requests beyond --grpc_workers threads wait in the executor's queue; nothing is rejected.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from concurrent import futures
from typing import Any, TypeVar

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

from core import dataplane, logs, metrics
from core.codecs import documents, kserve_grpc, tfs_grpc
from core.config import Settings
from core.dataplane import DataPlane
from core.errors import ServingError
from core.serving.registry import ModelManager
from protos import pool
from protos.gen.kserve import grpc_predict_v2_pb2 as pb
from protos.gen.kserve import grpc_predict_v2_pb2_grpc
from protos.gen.tensorflow_serving.apis import (
    model_management_pb2,
    model_service_pb2,
    model_service_pb2_grpc,
    prediction_service_pb2,
    prediction_service_pb2_grpc,
)

log = logging.getLogger("ov_serverless.grpc")

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Method = Callable[[Any, Req, grpc.ServicerContext], Resp]

SERVICES = (
    prediction_service_pb2.DESCRIPTOR.services_by_name["PredictionService"].full_name,
    model_service_pb2.DESCRIPTOR.services_by_name["ModelService"].full_name,
    pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name,
)
_MAX_GRPC_LENGTH = 2**31 - 1


def _rpc(method: Method[Req, Resp]) -> Method[Req, Resp]:
    """ServingError -> its gRPC code and message; any other exception -> INTERNAL (logged)."""

    @functools.wraps(method)
    def wrapper(self: Any, request: Req, context: grpc.ServicerContext) -> Resp:
        metadata = dict(getattr(context, "invocation_metadata", tuple)() or ())
        logs.request_id.set(str(metadata.get("x-request-id", ""))[:200])
        try:
            return method(self, request, context)
        except ServingError as exc:
            code, message = grpc.StatusCode[exc.grpc_code], exc.message
        except Exception as exc:  # a bug must not take the server down
            log.exception("Unhandled error in gRPC %s", method.__name__)
            code, message = grpc.StatusCode.INTERNAL, f"Internal server error: {type(exc).__name__}"
        context.abort(code, message)
        raise AssertionError("context.abort returned")  # pragma: no cover

    return wrapper


class ParseRequests(grpc.ServerInterceptor):
    """Bytes that do not parse as the method's request message (garbage, a cut message, a
    string field that is not UTF-8) are the client's mistake: INVALID_ARGUMENT. grpc's own
    parsing answers INTERNAL and logs an ERROR with a traceback for each such call. Unary
    requests only (streamed ones keep grpc's parsing); one wrapped handler per method."""

    def __init__(self) -> None:
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}  # served methods only

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        method = handler_call_details.method
        handler = self._handlers.get(method)
        if handler is None:
            handler = _parsing(method, continuation(handler_call_details))
            if handler is not None:  # an unknown method is not kept: names are the client's
                self._handlers[method] = handler
        return handler


def _parsing(method: str, handler: Any) -> Any:
    """`handler` taking the raw request and parsing it itself (unary requests only)."""
    if handler is None or handler.request_streaming or handler.request_deserializer is None:
        return handler
    parse = handler.request_deserializer
    kind = "unary_stream" if handler.response_streaming else "unary_unary"
    behavior = getattr(handler, kind)

    def parsed(raw: bytes, context: grpc.ServicerContext) -> Any:
        try:
            request = parse(raw)
        except DecodeError:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Invalid request: not a protobuf message of {method}",
            )
        return behavior(request, context)

    return handler._replace(request_deserializer=None, **{kind: parsed})


class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    def __init__(self, plane: DataPlane) -> None:
        self.plane = plane

    @_rpc
    def Predict(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        name, version = tfs_grpc.model_spec(request.model_spec)
        return self.plane.infer(dataplane.TFS_PREDICT, name, version, tfs_grpc.PredictCall(request))

    @_rpc
    def GetModelMetadata(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        name, version = tfs_grpc.require_spec(request)
        doc = self.plane.tfs_metadata(
            dataplane.TFS_METADATA,
            name,
            version,
            functools.partial(tfs_grpc.check_metadata_field, request),
        )
        return tfs_grpc.metadata_response(doc)


class ModelService(model_service_pb2_grpc.ModelServiceServicer):
    def __init__(self, plane: DataPlane) -> None:
        self.plane = plane

    @_rpc
    def GetModelStatus(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        name, version = tfs_grpc.require_spec(request)
        doc = self.plane.model_status(dataplane.TFS_STATUS, name, version)
        return tfs_grpc.status_response(doc)

    @_rpc
    def HandleReloadConfigRequest(  # noqa: N802
        self, request: Any, context: grpc.ServicerContext
    ) -> Any:
        self.plane.reload()
        response = model_management_pb2.ReloadConfigResponse()
        response.status.error_message = "OK"
        return response


class InferenceService(grpc_predict_v2_pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(self, plane: DataPlane) -> None:
        self.plane = plane

    @_rpc
    def ServerLive(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return pb.ServerLiveResponse(live=True)

    @_rpc
    def ServerReady(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return pb.ServerReadyResponse(ready=self.plane.ready)

    @_rpc
    def ServerMetadata(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return pb.ServerMetadataResponse(
            name=documents.SERVER_NAME, version=documents.SERVER_VERSION
        )

    @_rpc
    def ModelReady(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        """Unknown model or version: NOT_FOUND (as OVMS); known but not AVAILABLE: false."""
        version = kserve_grpc.parse_version(request.version)
        problem = self.plane.model_ready(
            dataplane.KSERVE_READY, request.name, version, unknown_raises=True
        )
        return pb.ModelReadyResponse(ready=problem is None)

    @_rpc
    def ModelMetadata(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        version = kserve_grpc.parse_version(request.version)
        doc = self.plane.kserve_metadata(dataplane.KSERVE_METADATA, request.name, version)
        return kserve_grpc.metadata_response(doc)

    @_rpc
    def ModelInfer(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        version = kserve_grpc.parse_version(request.model_version)
        return self.plane.infer(
            dataplane.KSERVE_INFER, request.model_name, version, kserve_grpc.InferCall(request)
        )

    def ModelStreamInfer(self, requests: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        """Not served (OVMS streams only to MediaPipe graphs): UNIMPLEMENTED, without the
        error log and traceback grpc writes for the generated stub's NotImplementedError."""
        context.abort(
            grpc.StatusCode.UNIMPLEMENTED, "ModelStreamInfer is not served here: use ModelInfer"
        )


class ModelHealth(health.HealthServicer):
    """grpc.health.v1 with "" = the server and one service per model name: SERVING while the
    model has an AVAILABLE version. Refreshed on every Check and once a second for Watch."""

    def __init__(self, manager: ModelManager, interval: float = 1.0) -> None:
        super().__init__()
        self.manager = manager
        self._known: dict[str, int] = {"": health_pb2.HealthCheckResponse.SERVING}
        self._refresh_lock = threading.Lock()
        self._stopped = threading.Event()
        self.refresh()
        threading.Thread(
            target=self._poll, args=(interval,), name="grpc-health", daemon=True
        ).start()

    def refresh(self) -> None:
        serving, not_serving = (
            health_pb2.HealthCheckResponse.SERVING,
            health_pb2.HealthCheckResponse.NOT_SERVING,
        )
        wanted = {"": serving if self.manager.ready else not_serving}
        for name, served in list(self.manager.models.items()):
            available = any(v.available for v in list(served.versions.values()))
            wanted[name] = serving if available else not_serving
        with self._refresh_lock:
            for service in self._known.keys() - wanted.keys():  # model removed from config
                wanted[service] = not_serving
            for service, status in wanted.items():
                if self._known.get(service) != status:
                    self.set(service, status)
                    self._known[service] = status

    def Check(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        self.refresh()
        return super().Check(request, context)

    def shutdown(self) -> None:
        self._stopped.set()
        self.enter_graceful_shutdown()

    def _poll(self, interval: float) -> None:
        while not self._stopped.wait(interval):
            try:
                self.refresh()
            except Exception:  # keep polling; a transient reload state must not kill it
                log.exception("health refresh failed")


def build(
    manager: ModelManager, args: argparse.Namespace
) -> tuple[grpc.Server, ModelHealth, futures.ThreadPoolExecutor]:
    workers = args.grpc_workers or max(8, 2 * (os.cpu_count() or 1))
    cap = getattr(args, "grpc_max_threads", None)  # OVMS's cap; absent when tests build args
    if cap:
        workers = min(workers, cap)
    limit = min(int(args.grpc_max_message_bytes), _MAX_GRPC_LENGTH)
    executor = futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="grpc")
    options = {
        "grpc.max_receive_message_length": limit,
        "grpc.max_send_message_length": limit,
        "grpc.so_reuseport": 0,  # a port in use is an error, not a silent share
        **dict(getattr(args, "grpc_channel_arguments", [])),
    }  # the user's win
    server = grpc.server(executor, interceptors=[ParseRequests()], options=list(options.items()))
    plane = DataPlane(manager, "gRPC", manager.settings.limits)
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        PredictionService(plane), server
    )
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelService(plane), server)
    grpc_predict_v2_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(
        InferenceService(plane), server
    )
    checker = ModelHealth(manager)
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    for module in (health_pb2, reflection_pb2):  # reflection describes from our private pool
        pool.adopt(module.DESCRIPTOR)
    reflection.enable_server_reflection(
        (*SERVICES, health.SERVICE_NAME, reflection.SERVICE_NAME), server, pool=pool.POOL
    )
    address = f"{_host(args.grpc_bind_address)}:{args.port}"
    server.add_insecure_port(address)  # raises RuntimeError when the port cannot be bound
    return server, checker, executor


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def start(manager: ModelManager, settings: Settings, args: argparse.Namespace) -> grpc.Server:
    """Start serving beside REST (models already loaded); the caller stops it."""
    server, _, _ = build(manager, args)
    server.start()
    log.info("gRPC listening on %s:%s", args.grpc_bind_address, args.port)
    return server


def serve_forever(settings: Settings, args: argparse.Namespace) -> int:
    """gRPC only (--rest_port 0): load, serve until SIGTERM/SIGINT, drain within the grace."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    manager = ModelManager.start(settings)
    if settings.reload_interval > 0:
        manager.start_polling()
    try:
        server, checker, executor = build(manager, args)
    except RuntimeError as exc:
        print(f"gRPC could not bind {args.grpc_bind_address}:{args.port}: {exc}", file=sys.stderr)
        return 1
    server.start()
    if args.metrics_port:
        _serve_metrics(manager, args.grpc_bind_address, args.metrics_port)
    print(
        f"ov-serverless gRPC listening on {args.grpc_bind_address}:{args.port}",
        file=sys.stderr,
        flush=True,
    )
    while not stop.wait(1.0):
        pass
    log.info(
        "Shutting down gRPC: finishing in-flight calls (grace %ss)", args.shutdown_grace_seconds
    )
    checker.shutdown()
    server.stop(args.shutdown_grace_seconds).wait()
    executor.shutdown(wait=False, cancel_futures=True)
    return 0


def _serve_metrics(manager: ModelManager, host: str, port: int) -> None:
    """gRPC-only mode has no REST port: Prometheus metrics get a small port of their own."""
    from core.api import Request, Response
    from handlers import http_server

    def handle(request: Request) -> Response:
        config = manager.metrics
        if not config.enabled or request.path != config.path:
            return Response(
                404,
                f"only {config.path} is served here, when metrics are enabled\n".encode(),
                {"content-type": "text/plain"},
            )
        body, content_type = metrics.exposition(manager, config.families)
        return Response(200, body, {"content-type": content_type})

    server = http_server.Server(
        handle, http_server.listen(host, port), threads=2, read_timeout=30.0, max_body=1 << 16
    )
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
