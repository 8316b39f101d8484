"""Long-running mode: REST under gunicorn (one process, threads), gRPC beside it.

One worker process holds the models; REST threads and gRPC threads share its compiled-model
cache. SIGTERM: gunicorn stops accepting, finishes in-flight requests within the grace
period, and the gRPC server is stopped with the same grace; exit code 0.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from gunicorn.app.base import BaseApplication

from core.api import App
from core.config import Settings
from core.manager import ModelManager


def serve(settings: Settings, args: argparse.Namespace) -> int:
    if not args.rest_port and not args.port:
        print("port and rest_port cannot both be unset", file=sys.stderr)
        return 2
    if not args.rest_port:
        from handlers import grpc_server

        return grpc_server.serve_forever(settings, args)
    RestServer(settings, args).run()
    return 0


class RestServer(BaseApplication):
    def __init__(self, settings: Settings, args: argparse.Namespace) -> None:
        self.settings = settings
        self.args = args
        self.grpc: Any = None
        super().__init__()

    def load_config(self) -> None:
        from handlers import rest_worker

        threads = self.args.rest_workers or max(4, 2 * (os.cpu_count() or 1))
        options: dict[str, Any] = {
            "bind": f"{self.args.rest_bind_address}:{self.args.rest_port}",
            "workers": 1,  # one process: one copy of every compiled model
            # gthread + a read timeout per client socket (slowloris cannot hold the threads)
            "worker_class": rest_worker.configure(self.args.rest_read_timeout_seconds),
            "threads": threads,
            "timeout": 0,  # inference may be long; the platform's timeout applies
            "graceful_timeout": int(self.args.shutdown_grace_seconds),
            "keepalive": 75,
            "accesslog": None,
            "loglevel": self.settings.log_level.lower(),
            "logger_class": "core.logs.GunicornLogger",  # JSON lines, like every other log
            "post_worker_init": self._start_grpc,
            "worker_exit": self._stop_grpc,
            "when_ready": self._announce,
        }
        for key, value in options.items():
            self.cfg.set(key, value)

    def load(self) -> Callable[..., Any]:
        from handlers.wsgi import make_wsgi_app

        self.app = App(ModelManager.start(self.settings), self.settings)
        if self.settings.reload_interval > 0:
            self.app.manager.start_polling()
        return make_wsgi_app(self.app)

    def _start_grpc(self, worker: Any) -> None:
        if self.args.port:
            from handlers import grpc_server

            self.grpc = grpc_server.start(self.app.manager, self.settings, self.args)

    def _stop_grpc(self, server: Any, worker: Any) -> None:
        if self.grpc is not None:
            self.grpc.stop(self.args.shutdown_grace_seconds).wait()

    def _announce(self, server: Any) -> None:
        base = f"http://{self.args.rest_bind_address}:{self.args.rest_port}"
        print(f"ov-serverless REST listening on {base}\n"
              f"  curl {base}/v2/health/ready\n"
              f"  curl {base}/v1/config\n"
              f"  curl -X POST {base}/v1/models/scaler:predict "
              "-d '{\"instances\": [[1, 2, 3, 4]]}'", file=sys.stderr, flush=True)
