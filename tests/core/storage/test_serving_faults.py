"""Storage faults at serving level: the endpoint dies before and in the middle of a reload.

POST /v1/config/reload answers within a bound, loaded versions keep serving, the half-done
download leaves nothing visible in the cache, and once the endpoint is back a reload picks up
changes again. Each test kills a private emulator (the session ones stay up).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core.api import App
from core.config import Settings
from core.errors import StorageError
from core.storage.backend import RemoteObject
from core.storage.bucket import BucketRepository
from tests.core.storage.helpers import Store, use_store_env_again
from tests.core.storage.serving import (
    call,
    predict,
    put_scaler,
    scaled,
    start_app,
    states,
    version_folders,
)
from tests.emulators import Emulator

RELOAD_WITHIN_S = 15.0
PREFIX = "repo/scaler"


def _app(store: Store, cache_dir: Path) -> App:
    return start_app(
        Settings(
            model_name="scaler",
            model_path=store.url(PREFIX),
            model_options={"model_version_policy": {"all": {}}},
            cache_dir=str(cache_dir),
        )
    )


def _timed_reload(app: App) -> tuple[int, Any]:
    started = time.monotonic()
    status, body = call(app, "POST", "/v1/config/reload")
    elapsed = time.monotonic() - started
    assert elapsed < RELOAD_WITHIN_S, f"reload took {elapsed:.1f} s"
    return status, body


def _repository(app: App) -> BucketRepository:
    repo = app.manager.model("scaler").repository
    assert isinstance(repo, BucketRepository)
    return repo


def _hook_download(
    app: App, monkeypatch: pytest.MonkeyPatch, before: Callable[[RemoteObject], None]
) -> None:
    backend = _repository(app).backend
    original = backend.download

    def download(obj: RemoteObject, dest: Path) -> None:
        before(obj)
        original(obj, dest)

    monkeypatch.setattr(backend, "download", download)


def test_endpoint_dies_before_and_mid_reload(
    own_store: Store, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    emulator: Emulator = own_store.emulator
    put_scaler(own_store, PREFIX, 1)
    app = _app(own_store, cache_dir)
    assert predict(app, version=1) == (200, scaled(1))

    # dead before the reload: the listing fails, nothing changes, v1 keeps serving
    emulator.kill()
    status, body = _timed_reload(app)
    assert status == 200, body
    assert predict(app, version=1) == (200, scaled(1))
    assert predict(app) == (200, scaled(1))

    # back (empty: in-memory), v2 added; the endpoint dies while v2's files download
    emulator.start()
    own_store.create()
    put_scaler(own_store, PREFIX, 1)
    put_scaler(own_store, PREFIX, 2)
    lock = threading.Lock()

    def die_on_v2(obj: RemoteObject) -> None:
        if f"{PREFIX}/2/" in obj.key:
            with lock:
                emulator.kill()

    _hook_download(app, monkeypatch, die_on_v2)
    _timed_reload(app)
    assert predict(app, version=1) == (200, scaled(1))
    assert predict(app) == (200, scaled(1))
    state, error = states(app)[2]
    assert state != "AVAILABLE"
    assert own_store.bucket in error and "cannot reach" in error, error
    # (gs/az: the re-seeded v1 has a new generation/ETag, so it was fetched again beside the old)
    assert {name.split("-")[0] for name in version_folders(cache_dir, own_store, PREFIX)} == {"1"}
    monkeypatch.undo()  # the hook and the env: the env is set again below
    use_store_env_again(monkeypatch, own_store)

    # back again with v3 as well: a reload picks the changes up
    emulator.start()
    own_store.create()
    for version in (1, 2, 3):
        put_scaler(own_store, PREFIX, version)
    status, body = _timed_reload(app)
    assert status == 201, body
    assert predict(app, version=3) == (200, scaled(3))
    assert predict(app) == (200, scaled(3))
    assert predict(app, version=1) == (200, scaled(1))


def test_version_whose_download_failed_is_retried(
    store: Store, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    put_scaler(store, PREFIX, 1)
    app = _app(store, cache_dir)
    put_scaler(store, PREFIX, 2)

    outage = threading.Event()
    outage.set()

    def fail(obj: RemoteObject) -> None:
        if outage.is_set():
            raise StorageError(f"Cannot download {obj.key}: simulated outage")

    _hook_download(app, monkeypatch, fail)
    _timed_reload(app)
    assert states(app)[2][0] != "AVAILABLE"
    outage.clear()  # the bucket is unchanged: the next reload should retry version 2
    _timed_reload(app)
    assert predict(app, version=2) == (200, scaled(2))


def test_changed_version_that_fails_to_download_keeps_the_old_one(
    store: Store, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    put_scaler(store, PREFIX, 1)
    app = _app(store, cache_dir)
    put_scaler(store, PREFIX, 1, factor=5)  # new content: a new fingerprint

    def fail(obj: RemoteObject) -> None:
        raise StorageError(f"Cannot download {obj.key}: simulated outage")

    _hook_download(app, monkeypatch, fail)
    _timed_reload(app)
    assert predict(app, version=1) == (200, scaled(1))
