"""The registry of servables: the warm compiled-model cache that lives for the process, and
the lookups a request makes in it (ModelManager.get: the servable to run, or the error to
answer). A manager's blob cache and host are values it passes to the versions it compiles.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core import errors
from core.config import MetricsConfig, ModelConfig, ServerConfig, Settings
from core.config.pipelines import PipelineConfig
from core.runtime.blobs import BlobCache
from core.runtime.host import Host
from core.runtime.ov_core import add_extension
from core.serving.model import RETIRE_GRACE_S, ModelVersion
from core.serving.pipeline import Pipeline
from core.serving.servable import State, Status
from core.serving.versions import ServedModel, cause
from core.storage import VersionFiles, open_repository
from core.tensors.spec import TensorSpec

log = logging.getLogger("ov_serverless.manager")


@dataclass
class ServedPipeline:
    """A pipeline behind the same interface as a model: one version, numbered 1."""

    config: PipelineConfig
    pipeline: Pipeline
    libraries: dict[str, Any]  # by name, the custom node libraries it was built with

    @property
    def versions(self) -> dict[int, Pipeline]:
        return {1: self.pipeline}

    def default_version(self) -> Pipeline:
        return self.pipeline

    def version(self, number: int | None) -> Pipeline:
        return self.pipeline  # OVMS ignores the requested version of a pipeline


@dataclass
class FailedVersion:
    """Version 1 of a pipeline that failed validation: LOADING, FAILED_PRECONDITION (as
    OVMS lists it), with no signature."""

    name: str
    message: str
    version: int = 1
    inputs: dict[str, TensorSpec] = field(default_factory=dict)
    outputs: dict[str, TensorSpec] = field(default_factory=dict)

    @property
    def status(self) -> Status:
        return Status(State.LOADING, "FAILED_PRECONDITION", self.message)

    @property
    def available(self) -> bool:
        return False


@dataclass
class FailedPipeline:
    """A pipeline of the config that failed validation: its status lists it; a request on
    it is refused with the reason."""

    name: str
    message: str

    @property
    def versions(self) -> dict[int, FailedVersion]:
        return {1: FailedVersion(self.name, self.message)}

    def default_version(self) -> Pipeline:
        raise errors.ModelNotReadyError(f"Pipeline {self.name} is not loaded: {self.message}")

    def version(self, number: int | None) -> Pipeline:
        return self.default_version()


def blob_cache(settings: Settings) -> BlobCache:
    """The compiled-blob cache the settings describe. Blobs are exported on concurrent hosts
    unless OVS_EXPORT_BLOBS says otherwise (a one-request instance rarely lives to reuse one)."""
    export = settings.concurrent if settings.export_blobs is None else settings.export_blobs
    folders = tuple(folder for folder in settings.compiled_cache if folder)
    return BlobCache(settings.cache_dir, folders, export)


class ModelManager:
    def __init__(self, settings: Settings) -> None:
        self.host = Host.of(settings.concurrent, settings.sequence_cleaner_minutes, settings.gather)
        self.blobs = blob_cache(settings)
        add_extension(settings.cpu_extension)
        self.settings = settings
        self.models: dict[str, ServedModel] = {}
        self.pipelines: dict[str, ServedPipeline] = {}
        # models removed from the config: their versions stay listed (UNLOADING, then END)
        # as OVMS lists them, and a request for them is a 404
        self.retired: dict[str, ServedModel] = {}
        self.config: ServerConfig | None = None
        self.ready = False
        self.timings: dict[str, float] = {}
        self.pipeline_errors: dict[str, str] = {}
        self._libraries: dict[tuple[str, str], Any] = {}
        self._broken: dict[str, ModelConfig] = {}  # configs that failed: not retried as is
        self._reload_lock = threading.Lock()
        self._check_lock = threading.Lock()
        self._last_check = time.monotonic()
        self._polling = False
        self._config_error = ""  # the last config file error, logged once

    @classmethod
    def start(cls, settings: Settings) -> ModelManager:
        manager = cls(settings)
        manager.apply(settings.server_config())
        manager.ready = True
        return manager

    def apply(self, config: ServerConfig) -> bool:
        """Apply a config as a diff: unchanged models are not touched (not recompiled)."""
        started = time.perf_counter()
        with self._reload_lock:
            current = dict(self.models)
            reopened = self._to_open(config, current)
            for model_config in config.models:
                if model_config.name in reopened:
                    current[model_config.name] = self._open(model_config)
            changed = bool(reopened)
            for model_config in config.models:
                changed |= current[model_config.name].sync(load=not self.settings.lazy_load)
            current = self._keep_old_when_broken(current, reopened)
            names = {m.name for m in config.models}
            outgoing = [m for n, m in self.models.items() if n not in names or current[n] is not m]
            for old in outgoing:
                if old.name in names:  # reopened: the versions it drops stay listed, retiring
                    current[old.name].list_retiring(old)
            self.models = {n: m for n, m in current.items() if n in names}
            self.retired = {
                **{n: m for n, m in self.retired.items() if n not in names},
                **{m.name: m for m in outgoing if m.name not in names},
            }
            changed |= self._apply_pipelines(config, reopened)
            self.config = config
        for served in outgoing:
            served.retire()
        self.timings["config_apply_s"] = time.perf_counter() - started
        return changed or bool(outgoing)

    def _to_open(self, config: ServerConfig, current: dict[str, ServedModel]) -> set[str]:
        """The models to open: new, or with a changed config, less a change that already
        failed as is (the previous config keeps serving). A model whose failed change was
        undone gets its status back."""
        self._broken = {n: c for n, c in self._broken.items() if n in current}
        names = set()
        for model_config in config.models:
            served = current.get(model_config.name)
            if served is None:
                names.add(model_config.name)
            elif served.config == model_config:
                if self._broken.pop(model_config.name, None) is not None:
                    served.config_restored()
            elif self._broken.get(model_config.name) != model_config:
                names.add(model_config.name)
        return names

    def _keep_old_when_broken(
        self, current: dict[str, ServedModel], reopened: set[str]
    ) -> dict[str, ServedModel]:
        """A changed model config whose versions all fail leaves the old one serving."""
        for name in reopened:
            old, new = self.models.get(name), current[name]
            if (
                old is not None
                and old.available
                and not new.available
                and not self.settings.lazy_load
            ):
                failure = new.failure()
                log.error(
                    "Model %s: the new config failed to load (%s); the previous config keeps "
                    "serving",
                    name,
                    failure,
                )
                self._broken[name] = new.config
                old.keep_serving_despite(failure)
                new.release_all()
                current[name] = old
            else:
                self._broken.pop(name, None)
        return current

    def _apply_pipelines(self, config: ServerConfig, reopened: set[str]) -> bool:
        libraries = {lib.name: self._library(lib.name, lib.base_path) for lib in config.libraries}
        pipelines: dict[str, ServedPipeline] = {}
        self.pipeline_errors = {}
        changed = False
        for pipeline_config in config.pipelines:
            name = pipeline_config.name
            old = self.pipelines.get(name)
            models = {n.model_name for n in pipeline_config.nodes if n.model_name}
            used = {n.library: libraries.get(n.library) for n in pipeline_config.nodes if n.library}
            intact = models <= set(self.models) and not models & reopened
            if (
                old is not None
                and old.config == pipeline_config
                and intact
                and _same_libraries(old.libraries, used)
            ):
                changed |= _report(old.pipeline, Status(State.AVAILABLE))  # an edit undone
                pipelines[name] = old
                continue
            try:
                pipeline = Pipeline(pipeline_config, self, libraries, set(self.models))
            except errors.ServingError as exc:
                log.error("Pipeline %s is invalid: %s", name, exc.message)
                self.pipeline_errors[name] = exc.message
                if old is not None and models <= set(self.models):
                    message = (
                        f"Reloading the pipeline failed ({exc.message}); "
                        "the previous definition keeps serving"
                    )
                    changed |= _report(old.pipeline, Status(State.AVAILABLE, "UNKNOWN", message))
                    pipelines[name] = old
                continue
            pipelines[name] = ServedPipeline(pipeline_config, pipeline, used)
        outgoing = [p for n, p in self.pipelines.items() if pipelines.get(n) is not p]
        self.pipelines = pipelines
        for served in outgoing:  # after a grace, so requests running on it finish
            timer = threading.Timer(RETIRE_GRACE_S, served.pipeline.retire)
            timer.daemon = True
            timer.start()
        return changed or bool(outgoing) or len(pipelines) != len(config.pipelines)

    def _library(self, name: str, base_path: str) -> Any:
        from core.serving.custom_nodes import load_library

        key = (name, base_path)
        if key not in self._libraries:
            self._libraries[key] = load_library(name, base_path)
        return self._libraries[key]

    def _open(self, config: ModelConfig) -> ServedModel:
        cache = str(Path(self.settings.cache_dir) / "models")
        try:
            repository = open_repository(config.base_path, Path(cache))
            if config.task or (Path(config.base_path) / "graph.pbtxt").is_file():
                from core.openai.layout import flat_aware

                repository = flat_aware(repository)  # OVMS's unversioned graph folder
        except Exception as exc:  # this model fails, with the cause; the others serve
            repository = _Unreadable(config.base_path, cause(exc))
        return ServedModel(config, repository, self.blobs, self.host)

    def reload(self) -> bool:
        """Re-read the config file (if any) and every repository; True when anything changed.

        An invalid config raises ConfigError and changes nothing."""
        self._last_check = time.monotonic()
        if self.settings.config_path:
            try:
                config = self.settings.server_config()
            except errors.ConfigError as exc:
                if exc.message != self._config_error:  # a broken file is logged once
                    log.error(
                        "Config reload rejected; the current config keeps serving: %s", exc.message
                    )
                self._config_error = exc.message
                raise
            self._config_error = ""
            return self.apply(config)
        changed = False
        for served in list(self.models.values()):
            changed |= served.sync(load=not self.settings.lazy_load)
        return changed

    @property
    def metrics(self) -> MetricsConfig:
        """What /metrics serves now: the live config's (a reload changes it), else the flags'."""
        return self.config.metrics if self.config is not None else self.settings.metrics

    def start_polling(self) -> threading.Event:
        """Long-running hosts: a background poller (OVMS file_system_poll_wait_seconds).
        Set the returned event to stop it."""
        stop = threading.Event()
        self._polling = True

        def poll() -> None:
            while not stop.wait(self.settings.reload_interval):
                self._reload_quietly()

        threading.Thread(target=poll, name="repository-poller", daemon=True).start()
        return stop

    def reload_if_due(self) -> None:
        """Serverless hosts: a cheap check at most once per reload_interval, on the request
        path, so no thread burns CPU between invocations."""
        interval = self.settings.reload_interval
        if self._polling or interval <= 0 or time.monotonic() - self._last_check < interval:
            return
        if not self._check_lock.acquire(blocking=False):
            return  # another request is already checking
        try:
            self._reload_quietly()
        finally:
            self._check_lock.release()

    def restart_clock(self) -> None:
        """The next repository check is one reload_interval from now."""
        self._last_check = time.monotonic()

    @contextlib.contextmanager
    def checks_held(self) -> Iterator[None]:
        """While held, a request's repository check (reload_if_due) skips instead of
        waiting for it."""
        with self._check_lock:
            yield

    def _reload_quietly(self) -> None:
        """A background or per-request reload: a failure is logged, never raised."""
        try:
            self.reload()
        except errors.ConfigError:
            pass  # reload() logged it
        except errors.ServingError as exc:
            log.error("Reload failed; the current config keeps serving: %s", exc.message)
        except Exception:  # a bug must not stop the poller: the next poll tries again
            log.exception("Reload failed; the current config keeps serving")

    def model(self, name: str) -> ServedModel | ServedPipeline | FailedPipeline:
        served = self.models.get(name) or self.pipelines.get(name) or self.retired.get(name)
        if served is None:
            if name in self.pipeline_errors:
                return FailedPipeline(name, self.pipeline_errors[name])
            raise errors.ModelNotFoundError(name)
        return served

    def failed_pipelines(self) -> dict[str, FailedPipeline]:
        """The config's pipelines that failed validation and serve no older definition."""
        return {
            name: FailedPipeline(name, message)
            for name, message in self.pipeline_errors.items()
            if name not in self.pipelines
        }

    def get(self, name: str, version: int | None = None) -> ModelVersion | Pipeline:
        """The AVAILABLE servable a request should run on, or the error a client should see."""
        served = self.model(name)
        if (
            self.settings.lazy_load
            and isinstance(served, ServedModel)
            and served is not self.retired.get(name)
        ):
            served.ensure_loaded()
        return served.version(version)


def _same_libraries(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """The same library objects (a library moved to another file is a new one)."""
    return old.keys() == new.keys() and all(new[name] is old[name] for name in new)


def _report(pipeline: Pipeline, status: Status) -> bool:
    """Set a serving pipeline's status; True when that changed it."""
    if pipeline.status == status:
        return False
    pipeline.status = status
    return True


class _Unreadable:
    """Stand-in repository for a base path that could not even be opened (bad scheme...)."""

    def __init__(self, url: str, message: str) -> None:
        self.url = url
        self.message = message

    def versions(self) -> dict[int, str]:
        raise errors.StorageError(self.message)

    def fetch(self, version: int) -> VersionFiles:
        raise errors.StorageError(self.message)

    def release(self, files: VersionFiles) -> None:
        """Nothing was fetched."""
