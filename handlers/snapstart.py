"""Lambda SnapStart runtime hooks (the `snapshot-restore-py` package, when importable).

Lambda runs the init phase once, snapshots the process (memory and disk), and resumes many
copies from it. Before the snapshot, everything slow happens once: every model loaded and
compiled, one warm inference per version, the App built; storage connections are closed and
the logs flushed. After each restore, what a copy must not share with its siblings, nor carry
from the snapshot's past, is renewed:

  random state        Python's `random` and numpy's global generator re-seeded from the OS;
                      stateful models' sequence-id counters restart at a random number
  storage clients     every bucket client rebuilt (pooled TLS connections, SDK clients and
                      credentials read at init dropped); cached metadata-server tokens dropped
  time-based state    the repository reload timer and the idle-sequence sweep restart now
  CPU                 the compiled models' device key (OpenVINO version, device, CPU ISA
                      flags: the compiled-blob cache key) is recomputed; when this CPU differs,
                      every model recompiles in a background thread while the old compile
                      keeps serving (ServedModel.sync loads beside, then swaps), or at once,
                      inside the hook, when this CPU lacks a flag the old compile may use

Each hook logs one JSON line, `{"ov_serverless_snapstart": {...}}`, with its steps' durations.
This module is the one place that knows what a snapshot copies; it renews that state through
the core's public functions (metrics.snapshot/restore, blobs.forget_host, the stateful
versions' and the manager's clock restarts); tests/handlers/test_snapstart.py holds it to
that. It imports nothing at import time beyond what the handler has already imported.
"""

from __future__ import annotations

import contextlib
import logging
import random
import secrets
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import orjson

from core.api import App, default_app
from core.errors import ServingError
from core.runtime.ov_core import ov_core
from core.serving.model import ModelVersion

log = logging.getLogger("ov_serverless.snapstart")

# what before_snapshot saw, read back by after_restore: {device: its description} and the
# CPU's ISA flags
_devices: dict[str, str] = {}
_flags: set[str] = set()
_recompile: threading.Thread | None = None


def register(
    cold_start: dict[str, Any] | None = None, app: Callable[[], App] = default_app
) -> bool:
    """Register both hooks with snapshot-restore-py; False when it is not installed (not on
    a Lambda python runtime). `cold_start` (the handler's cold-start record) gets the
    restore's figures."""
    try:
        from snapshot_restore_py import register_after_restore, register_before_snapshot
    except ImportError:
        return False
    register_before_snapshot(before_snapshot, app)
    register_after_restore(after_restore, app, cold_start)
    return True


# -- before the snapshot -------------------------------------------------------------------------


def before_snapshot(app: Callable[[], App] = default_app) -> dict[str, float]:
    steps: dict[str, float] = {}
    with _step(steps, "load_s"):
        built = app()
        for served in built.manager.models.values():
            served.ensure_loaded()  # lazy mode: compile now, not on a restored copy
    with _step(steps, "warm_s"), _metrics_unchanged():
        warmed = sum(_warm(version) for version in _versions(built))
    with _step(steps, "storage_s"):
        renew_storage(built)
    _devices.clear()
    _devices.update(device_descriptions(built, refresh=False))
    _flags.clear()
    _flags.update(cpu_flags())
    with _step(steps, "flush_s"):
        _flush_logs()
    _log("before_snapshot", steps, warm_inferences=warmed)
    _flush_logs()
    return steps


def _versions(app: App) -> list[ModelVersion]:
    return [
        version
        for served in app.manager.models.values()
        for version in served.versions.values()
        if version.available
    ]


def _warm(version: ModelVersion) -> int:
    """One inference on zeros (dynamic dimensions as 1): the first request then meets warm
    caches and allocated buffers. Stateful models are skipped (an inference opens a sequence);
    so are string inputs, which zeros cannot fill."""
    from core.serving.stateful import StatefulModelVersion

    if isinstance(version, StatefulModelVersion):
        return 0
    inputs: dict[str, np.ndarray] = {}
    for name, spec in version.inputs.items():
        if spec.dtype.numpy.kind in "OSU":
            return 0
        shape = [max(low, 1) for low, _ in spec.dims]
        inputs[name] = np.zeros(shape, dtype=spec.dtype.numpy)
    try:
        version.infer(inputs)
    except Exception as exc:  # warming is an optimisation: a model it cannot feed still serves
        log.warning(
            "Model %s version %d: no warm inference: %s", version.name, version.version, exc
        )
        return 0
    return 1


@contextlib.contextmanager
def _metrics_unchanged() -> Iterator[None]:
    """The warm inferences leave no sample behind (e.g. in ovms_wait_for_infer_req_time_us):
    a restored copy's metrics count its own requests only."""
    from core import metrics

    before = metrics.snapshot()
    try:
        yield
    finally:
        metrics.restore(before)


# -- after a restore -------------------------------------------------------------------------------


def after_restore(
    app: Callable[[], App] = default_app, cold_start: dict[str, Any] | None = None
) -> dict[str, float]:
    global _recompile
    steps: dict[str, float] = {}
    built = app()
    with _step(steps, "reseed_s"):
        reseed(built)
    with _step(steps, "storage_s"):
        renew_storage(built)
    with _step(steps, "clocks_s"):
        restart_clocks(built)
    with _step(steps, "cpu_s"):
        changed = sorted(
            device
            for device, description in device_descriptions(built, refresh=True).items()
            if _devices.get(device, description) != description
        )
        missing = sorted(_flags - cpu_flags()) if changed else []
        if missing:  # the old compile may use instructions this CPU lacks: not one more call
            recompile(built)
        elif changed:
            from core.runtime import background  # the exit waits for a compile under way

            _recompile = background.start(lambda: recompile(built), "snapstart-recompile")
    _log("after_restore", steps, cpu_changed=changed, cpu_missing=missing)
    if cold_start is not None:
        cold_start["restored"] = True
        cold_start["after_restore_s"] = sum(steps.values())
    return steps


def reseed(app: App) -> None:
    """Copies resumed from one snapshot would draw the same 'random' numbers."""
    from core.serving.stateful import StatefulModelVersion

    random.seed(secrets.randbits(128))
    np.random.seed(secrets.randbits(32))
    for version in _every_version(app):
        if isinstance(version, StatefulModelVersion) and version.available:
            version.restart_ids(secrets.randbelow(1 << 62) + 1)


def renew_storage(app: App) -> None:
    """A fresh client for every bucket repository: pooled connections (dead or shared after a
    restore), SDK clients and the credentials read when they were built are dropped, and the
    next call reads the environment's credentials anew."""
    from core import storage

    for served in [*app.manager.models.values(), *app.manager.retired.values()]:
        try:
            storage.renew_client(served.repository)
        except ServingError as exc:  # e.g. credentials gone: the old client fails visibly
            log.error("Model %s: cannot renew its storage client: %s", served.name, exc.message)
    storage.forget_tokens()  # metadata-server tokens and their expiry clocks


def restart_clocks(app: App) -> None:
    """Deadlines measured on the monotonic clock before the snapshot mean nothing after it."""
    from core.serving.stateful import StatefulModelVersion

    now = time.monotonic()
    app.manager.restart_clock()  # the next repository check: one reload_interval from now
    for version in _every_version(app):
        if isinstance(version, StatefulModelVersion) and version.available:
            version.restart_clocks(now)


def device_descriptions(app: App, refresh: bool) -> dict[str, str]:
    """{device: what the compiled-blob key holds of it}, re-read from this CPU when refresh."""
    from core.runtime import blobs

    core = ov_core()
    if refresh:
        blobs.forget_host()
    devices = {version.config.target_device for version in _versions(app)}
    return {device: blobs.device_id(core, device) for device in sorted(devices)}


def cpu_flags() -> set[str]:
    """The CPU's ISA flags the compiled-blob key holds."""
    from core.runtime import blobs

    return set(blobs.cpu_flags().split())


def recompile(app: App) -> None:
    """Compile every model again for this CPU, each beside its serving compile, which keeps
    answering until the new one is AVAILABLE."""
    started = time.perf_counter()
    with app.manager.checks_held():
        for served in list(app.manager.models.values()):
            served.fingerprints.clear()  # every version is stale: sync loads each anew
            served.sync(load=True)
    _log("recompile", {"compile_s": time.perf_counter() - started})


def wait_for_recompile(timeout: float | None = None) -> bool:
    """True when no background recompile runs (any started has finished)."""
    if _recompile is not None:
        _recompile.join(timeout)
        return not _recompile.is_alive()
    return True


def _every_version(app: App) -> list[ModelVersion]:
    return [
        version for served in app.manager.models.values() for version in served.versions.values()
    ]


# -- helpers -------------------------------------------------------------------------------------


class _step:  # noqa: N801 (used as a context manager, like a function)
    def __init__(self, steps: dict[str, float], name: str) -> None:
        self.steps, self.name = steps, name

    def __enter__(self) -> None:
        self.started = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.steps[self.name] = round(time.perf_counter() - self.started, 6)


def _log(hook: str, steps: dict[str, float], **extra: Any) -> None:
    record = {"hook": hook, "duration_s": round(sum(steps.values()), 6), **steps, **extra}
    sys.stdout.write(orjson.dumps({"ov_serverless_snapstart": record}).decode() + "\n")
    sys.stdout.flush()


def _flush_logs() -> None:
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
