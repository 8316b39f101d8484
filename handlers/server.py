"""Long-running mode: REST (handlers.http_server) and gRPC beside it, in one process.

The REST threads and the gRPC threads share the process's compiled-model cache. The REST port
is bound before the models load, so early clients queue instead of being refused. SIGTERM or
SIGINT: the REST listener closes at once (new connections are refused), REST and gRPC finish
their in-flight requests within the same grace period, side by side; exit code 0.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

from core.api import App
from core.config import Settings
from core.serving.registry import ModelManager
from handlers import http_server


def serve(settings: Settings, args: argparse.Namespace) -> int:
    if not args.rest_port:  # with --port: the command line checked one is given
        from handlers import grpc_server

        return grpc_server.serve_forever(settings, args)
    try:
        listener = http_server.listen(args.rest_bind_address, args.rest_port)
    except OSError as exc:
        print(
            f"REST could not bind {args.rest_bind_address}:{args.rest_port}: {exc}", file=sys.stderr
        )
        return 1
    stop = threading.Event()  # a signal during the model load: serve nothing, exit 0
    _on_signals(stop.set)
    app = App(ModelManager.start(settings), settings)
    if settings.reload_interval > 0:
        app.manager.start_polling()
    try:
        grpc = _start_grpc(app, settings, args)
    except RuntimeError as exc:
        print(f"gRPC could not bind {args.grpc_bind_address}:{args.port}: {exc}", file=sys.stderr)
        return 1
    server = http_server.Server(
        app.handle,
        listener,
        max_body=settings.max_request_bytes,
        refuse=app.refuse,
        threads=args.rest_workers or max(4, 2 * (os.cpu_count() or 1)),
        read_timeout=args.rest_read_timeout_seconds,
    )
    _on_signals(server.shutdown)
    if stop.is_set():
        server.shutdown()
    _announce(args)
    server.serve_forever()
    grace = args.shutdown_grace_seconds
    grpc_done = grpc.stop(grace) if grpc is not None else None  # drains beside REST
    server.drain(grace)
    if grpc_done is not None:
        grpc_done.wait()
    return 0


def _on_signals(action: Any) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: action())


def _start_grpc(app: App, settings: Settings, args: argparse.Namespace) -> Any:
    if not args.port:
        return None
    from handlers import grpc_server

    return grpc_server.start(app.manager, settings, args)


def _announce(args: argparse.Namespace) -> None:
    base = f"http://{args.rest_bind_address}:{args.rest_port}"
    print(
        f"ov-serverless REST listening on {base}\n"
        f"  curl {base}/v2/health/ready\n"
        f"  curl {base}/v1/config\n"
        f"  curl -X POST {base}/v1/models/scaler:predict "
        "-d '{\"instances\": [[1, 2, 3, 4]]}'",
        file=sys.stderr,
        flush=True,
    )
