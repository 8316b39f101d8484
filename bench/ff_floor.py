"""The functions-framework floor of the cold bench: the least a function can do to answer the
bench's KServe binary predict with OpenVINO under `functions-framework`.

    BENCH_MODEL_FILE=model.xml functions-framework --source=bench/ff_floor.py --target=predict

It compiles in gunicorn's worker right after the fork (OpenVINO's threads do not survive one),
as handlers/cloud_run.py does, and only there (`import openvino` has its telemetry fork a child
from a thread). It answers with the first output's raw bytes: no config, no checks, no
response header. Its start minus the minimal script's is what functions-framework
itself (flask's import, gunicorn's arbiter and fork) adds to any function.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

import flask
import functions_framework
import numpy as np
import openvino as ov

_compiled: list[Any] = []
_ready = threading.Event()


def _compile() -> None:
    _compiled.append(
        ov.Core().compile_model(
            os.environ["BENCH_MODEL_FILE"], "CPU", {"PERFORMANCE_HINT": "LATENCY"}
        )
    )
    _ready.set()


_forked_by_main_thread = False  # gunicorn forks its worker there; telemetry from its own thread


def _before_fork() -> None:
    global _forked_by_main_thread
    _forked_by_main_thread = threading.current_thread() is threading.main_thread()


def _after_fork() -> None:
    if _forked_by_main_thread:
        threading.Thread(target=_compile, daemon=True).start()


os.register_at_fork(before=_before_fork, after_in_child=_after_fork)


@functions_framework.http
def predict(request: flask.Request) -> tuple[bytes, int]:
    body = request.get_data()
    split = int(request.headers["Inference-Header-Content-Length"])
    shape = json.loads(body[:split])["inputs"][0]["shape"]
    x = np.frombuffer(body[split:], np.float32).reshape(shape)
    _ready.wait()
    outputs = _compiled[0].create_infer_request().infer({0: x})
    return np.ascontiguousarray(next(iter(outputs.values()))).tobytes(), 200
