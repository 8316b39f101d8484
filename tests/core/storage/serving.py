"""Helpers for serving-level storage tests: scaler versions in a bucket, an in-process App,
and REST calls through `App.handle` (the same router every handler uses).

A version of the demo scaler multiplies by its version number, so an answer proves which
version served it.
"""

from __future__ import annotations

import functools
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from core.api import App, make_request
from core.config import Settings
from core.serving.registry import ModelManager
from demo import models
from tests.core.storage.helpers import Store

X = [1.0, 2.0, 3.0, 4.0]
FILES = ("model.xml", "model.bin")


@functools.cache
def scaler_files(factor: float) -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as tmp:
        models.save(models.scaler(factor), Path(tmp))
        return {name: Path(tmp, name).read_bytes() for name in FILES}


def put_scaler(store: Store, prefix: str, version: int, factor: float | None = None) -> None:
    for name, data in scaler_files(float(version if factor is None else factor)).items():
        store.put(f"{prefix}/{version}/{name}", data)


def delete_version(store: Store, prefix: str, version: int) -> None:
    for name in FILES:
        store.delete(f"{prefix}/{version}/{name}")


def start_app(settings: Settings) -> App:
    return App(ModelManager.start(settings), settings)


def call(app: App, method: str, path: str, doc: Any = None) -> tuple[int, Any]:
    body = b"" if doc is None else orjson.dumps(doc)
    response = app.handle(make_request(method, path, body))
    return response.status, orjson.loads(response.body) if response.body else None


def predict(app: App, name: str = "scaler", version: int | None = None) -> tuple[int, Any]:
    """TFS row predict of X; -> (status, predictions or the error text)."""
    path = f"/v1/models/{name}" + (f"/versions/{version}" if version else "") + ":predict"
    status, doc = call(app, "POST", path, {"instances": [X]})
    return status, doc["predictions"][0] if status == 200 else doc["error"]


def kserve_infer(app: App, version: int) -> list[float]:
    doc = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": X}]}
    status, body = call(app, "POST", f"/v2/models/scaler/versions/{version}/infer", doc)
    assert status == 200, body
    assert body["model_version"] == str(version)
    data: list[float] = body["outputs"][0]["data"]
    return data


def scaled(factor: float) -> list[float]:
    return [factor * x for x in X]


def states(app: App, name: str = "scaler") -> dict[int, tuple[str, str]]:
    """version -> (state, error_message) from GET /v1/models/<name>."""
    status, doc = call(app, "GET", f"/v1/models/{name}")
    assert status == 200, doc
    return {
        int(v["version"]): (v["state"], v["status"]["error_message"])
        for v in doc["model_version_status"]
    }


def wait_state(
    app: App, version: int, state: str, timeout_s: float = 10.0, name: str = "scaler"
) -> None:
    deadline = time.monotonic() + timeout_s
    while states(app, name).get(version, ("",))[0] != state:
        assert time.monotonic() < deadline, f"v{version} not {state}: {states(app, name)}"
        time.sleep(0.02)


def version_folders(cache_dir: Path, store: Store, prefix: str) -> list[str]:
    """The visible (published) version folders a remote model left under the cache."""
    root = Path(cache_dir, "models", store.scheme, store.bucket, *prefix.split("/"))
    return (
        sorted(p.name for p in root.iterdir() if not p.name.startswith("."))
        if root.exists()
        else []
    )


def join_retirements(timeout_s: float = 10.0) -> None:
    """Wait for every ended version's drain thread: its downloaded files are released last."""
    for thread in threading.enumerate():
        if thread.name.startswith("retire-"):
            thread.join(timeout_s)
            assert not thread.is_alive(), f"{thread.name} still draining"
