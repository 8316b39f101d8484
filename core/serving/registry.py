"""The registry of servables: the warm compiled-model cache that lives for the process.

Serving state changes atomically: a new version is loaded beside the serving ones and only
then published (copy-on-write dict swap); a removed or replaced version is retired after its
in-flight requests finish; a replacement that fails to load leaves the old one serving.
Readers never take a lock on the hot path.
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

from core import errors, metrics
from core.config import MetricsConfig, ModelConfig, ServerConfig, Settings
from core.config.pipelines import PipelineConfig
from core.runtime import auto_shape
from core.runtime.blobs import BlobCache
from core.runtime.host import Host
from core.runtime.ov_core import add_extension
from core.serving.model import RETIRE_GRACE_S, ModelVersion
from core.serving.pipeline import Pipeline
from core.serving.servable import State, Status
from core.storage import Repository, VersionFiles, open_repository
from core.storage.secrets import redact

log = logging.getLogger("ov_serverless.manager")


@dataclass
class ServedModel:
    """Every version of one model name, with the config that produced them."""

    config: ModelConfig
    repository: Repository
    blobs: BlobCache  # where its versions find and write compiled blobs (the manager's)
    host: Host = field(default_factory=Host)  # the manager's: concurrent or one at a time
    versions: dict[int, ModelVersion] = field(default_factory=dict)
    fingerprints: dict[int, str] = field(default_factory=dict)
    error: str = ""  # why the repository itself could not be read, if it could not
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _present: set[int] = field(default_factory=set)  # version folders seen by the last sync
    _wanted: set[int] = field(default_factory=set)  # of those, the ones the policy selects
    _refit_lock: threading.Lock = field(default_factory=threading.Lock)  # one auto reload at once

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def available(self) -> bool:
        return any(v.available for v in self.versions.values())

    def default_version(self) -> ModelVersion:
        """The newest AVAILABLE version ("latest"), as OVMS answers version 0 / no version."""
        for number in sorted(self.versions, reverse=True):
            candidate = self.versions[number]
            if candidate.available:
                return candidate
        if self.error:
            raise errors.ModelNotReadyError(f"Model {self.name} is not available: {self.error}")
        if any(v.status.state <= State.AVAILABLE for v in self.versions.values()):
            raise errors.ModelNotReadyError(
                f"Model with requested version is not loaded yet - name: {self.name}"
            )
        raise errors.ModelNotFoundError(self.name)

    def version(self, number: int | None) -> ModelVersion:
        if number is None:
            return self.default_version()
        found = self.versions.get(number)
        if found is None:
            raise errors.VersionNotFoundError(self.name, number)
        if found.available:
            return found
        if found.status.state >= State.UNLOADING:
            raise errors.NotFoundError(
                f"Model with requested version is retired - name: {self.name}; version: {number}"
            )
        raise errors.ModelNotReadyError(
            f"Model with requested version is not loaded yet - name: {self.name}; "
            f"version: {number}" + _detail(found.status)
        )

    def sync(self, load: bool = True) -> bool:
        """Bring versions in line with the repository and the version policy.

        New and changed versions are loaded beside the serving ones, then published; versions
        no longer wanted are retired, except one a wanted version that is not AVAILABLE (failed,
        or not loaded yet in lazy mode) would have displaced: it keeps serving. Returns True
        when anything changed.
        """
        with self._lock:
            try:
                present = self.repository.versions()
            except Exception as exc:  # this model fails, with the cause; the others serve
                self.error = errors.relative(_cause(exc), self.config.base_path)
                log.error("Model %s: %s", self.name, _cause(exc))
                return False
            missing = "" if present else "No version found in the model's base path"
            if missing and missing != self.error:  # the path is for the log only, once
                log.error("Model %s: no version found in %s", self.name, self.config.base_path)
            self.error = missing
            wanted = {v: present[v] for v in self.config.version_policy.select(list(present))}
            added = [v for v, fp in wanted.items() if self._stale(v, fp)]
            prepared = {v: self._prepare(v, load) for v in added}
            fresh = self._keep_serving_on_failure({v: new for v, (new, _) in prepared.items()})
            before = self.versions
            replaced = [
                before[v]
                for v in fresh
                if v in before  # (a failed one holds nothing)
                and before[v].status.state in (State.START, State.AVAILABLE)
            ]
            for v in fresh:  # failed objects overwritten here hold no model, only files
                if v in before and before[v].status.state is State.LOADING:
                    self.repository.release(before[v].files)
            self.versions = {**before, **fresh}
            # a version whose files were read is not tried again until they change; one whose
            # files could not be fetched (storage down) is retried on the next sync
            self.fingerprints = {
                **{v: fp for v, fp in self.fingerprints.items() if v in wanted},
                **{v: wanted[v] for v, (_, fetched) in prepared.items() if fetched},
            }
            self._present, self._wanted = set(present), set(wanted)
            displaced = self._displaced()
        for version in [*replaced, *displaced]:
            self._retire(version)
        kept_old = len(fresh) < len(prepared)  # a serving version's status took a failure
        return (
            bool(displaced)
            or kept_old
            or any(not _same_failure(before.get(v), new) for v, new in fresh.items())
        )

    def _stale(self, number: int, fingerprint: str) -> bool:
        current = self.versions.get(number)
        return (
            current is None
            or current.status.state >= State.UNLOADING
            or self.fingerprints.get(number) != fingerprint
        )

    def _displaced(self) -> list[ModelVersion]:
        """Serving versions the policy no longer wants, less those still standing in for a
        wanted version that is not AVAILABLE. Called with the lock held."""
        pending = {v for v in self._wanted if v in self.versions and not self.versions[v].available}
        standing_in = set(
            self.config.version_policy.select([v for v in self._present if v not in pending])
        )
        return [
            version
            for v, version in self.versions.items()
            if v not in self._wanted
            and v not in standing_in
            and version.status.state < State.UNLOADING
        ]

    def _keep_serving_on_failure(self, fresh: dict[int, ModelVersion]) -> dict[int, ModelVersion]:
        """A changed version whose replacement failed keeps serving the old files; its status
        stays AVAILABLE and carries the failure (error code and message) until files that
        load replace it. -> the versions to publish."""
        kept = {}
        for number, new in fresh.items():
            old = self.versions.get(number)
            if new.status.error_code != "OK" and old is not None and old.available:
                message = (
                    f"The changed files failed to load ({new.status.error_message}); "
                    "the previous files keep serving"
                )
                log.error("Model %s version %d: %s", self.name, number, message)
                old.status = Status(State.AVAILABLE, new.status.error_code, message)
                self.repository.release(new.files)
                continue
            kept[number] = new
        return kept

    def _prepare(self, number: int, load: bool) -> tuple[ModelVersion, bool]:
        """A new version object (loaded unless lazy) and whether its files were fetched."""
        kind = _version_class(self.config)
        try:
            files = self.repository.fetch(number)
        except Exception as exc:  # this version fails, with the cause; the others serve
            failed = self._new(kind, number, VersionFiles(Path()))
            failed.status = Status(
                State.LOADING, "UNKNOWN", errors.relative(_cause(exc), self.config.base_path)
            )
            log.error("Model %s version %d: %s", self.name, number, _cause(exc))
            return failed, False
        version = self._new(_version_class(self.config, files.folder), number, files)
        if auto_shape.uses_auto(self.config):
            version.refit = self.refit
        if load:
            version.load()
        return version, True

    def _new(self, kind: type[ModelVersion], number: int, files: VersionFiles) -> ModelVersion:
        """A version object of this model (not loaded) over `files`."""
        return kind(self.config, number, files.folder, self.blobs, files=files, host=self.host)

    def refit(self, old: ModelVersion, inputs: dict[str, Any]) -> ModelVersion:
        """batch_size / shape "auto": the version to run `inputs` on, `old` unless it needs a
        reload for them. The reload compiles beside `old`, then replaces it; requests running
        on `old` finish there. Requests that need the same reload wait for the first one."""
        if auto_shape.needed(old, inputs) is None:
            return old
        with self._refit_lock:
            current = self.versions.get(old.version)
            if current is None or not current.available:
                current = old
            fit = auto_shape.needed(current, inputs)
            if fit is None or fit == current.fit:  # fitted meanwhile, or no reload would help
                return current
            return self._reload_fitted(current, fit)

    def _reload_fitted(self, current: ModelVersion, fit: auto_shape.Fit) -> ModelVersion:
        started = time.perf_counter()
        log.info(
            "Model %s version %d: reloading for %s (auto)",
            self.name,
            current.version,
            fit.describe(),
        )
        version = self._new(type(current), current.version, current.files)
        version.fit, version.refit = fit, self.refit
        serving = current.status
        current.status = Status(
            State.AVAILABLE,
            "OK",
            f"Reloading for {fit.describe()} (auto); this version serves meanwhile",
        )
        try:
            version.load()
        except BaseException:  # load() reports what it expects; anything else: as it was
            current.status = serving
            raise
        if not version.available:
            message = (
                f"Reload for {fit.describe()} failed: {version.status.error_message}; "
                "the current shape keeps serving"
            )
            current.status = Status(State.AVAILABLE, version.status.error_code, message)
            raise errors.InvalidInputError(
                f"Model could not be reloaded for the request's shape: {fit.describe()}"
            )
        version.timings["auto_reload_s"] = time.perf_counter() - started
        metrics.AUTO_RELOADS.labels(self.name, str(current.version)).inc()
        with self._lock:
            published = self.versions.get(current.version) is current
            if published:
                self.versions = {**self.versions, current.version: version}
        if not published:  # replaced by a sync meanwhile: that one serves
            current.status = serving
        self._retire(current if published else version, release=False)
        return version if published else current

    def ensure_loaded(self) -> None:
        """Lazy mode: compile versions on first use; then retire what they displace."""
        if not any(v.status.state is State.START for v in self.versions.values()):
            return
        with self._lock:
            for version in list(self.versions.values()):
                if version.status.state is State.START:
                    version.load()
            displaced = self._displaced()
        for version in displaced:
            self._retire(version)

    def retire(self) -> None:
        for version in self.versions.values():
            if version.status.state < State.UNLOADING:
                self._retire(version)

    def _retire(self, version: ModelVersion, release: bool = True) -> None:
        """UNLOADING now (no new request resolves it); END in the background once drained,
        then its downloaded files go (core.storage.folders counts who still uses them) unless
        an auto reload of the version took them over (release False)."""
        if version.unpublish():

            def drain() -> None:
                version.drain()
                if release:
                    self.repository.release(version.files)

            threading.Thread(
                target=drain, name=f"retire-{version.name}-{version.version}", daemon=True
            ).start()


@dataclass
class ServedPipeline:
    """A pipeline behind the same interface as a model: one version, numbered 1."""

    config: PipelineConfig
    pipeline: Pipeline

    @property
    def versions(self) -> dict[int, Pipeline]:
        return {1: self.pipeline}

    def default_version(self) -> Pipeline:
        return self.pipeline

    def version(self, number: int | None) -> Pipeline:
        return self.pipeline  # OVMS ignores the requested version of a pipeline


def _version_class(config: ModelConfig, folder: Path | None = None) -> type[ModelVersion]:
    if config.task or (folder is not None and (folder / "graph.pbtxt").is_file()):
        from core.openai.servable import TextModelVersion

        return TextModelVersion  # embeddings / rerank (OVMS's export layout)
    if config.stateful:
        from core.serving.stateful import StatefulModelVersion

        return StatefulModelVersion
    return ModelVersion


def blob_cache(settings: Settings) -> BlobCache:
    """The compiled-blob cache the settings describe. Blobs are exported on concurrent hosts
    unless OVS_EXPORT_BLOBS says otherwise (a one-request instance rarely lives to reuse one)."""
    export = settings.concurrent if settings.export_blobs is None else settings.export_blobs
    folders = tuple(folder for folder in settings.compiled_cache if folder)
    return BlobCache(settings.cache_dir, folders, export)


def _same_failure(old: ModelVersion | None, new: ModelVersion) -> bool:
    """A retried version that failed again exactly as before: nothing changed."""
    return old is not None and new.status.error_code != "OK" and old.status == new.status


def _cause(exc: Exception) -> str:
    """A failure in the words a status carries: a ServingError's message, else its type and
    text (redacted: it may come from inside a storage SDK)."""
    if isinstance(exc, errors.ServingError):
        return exc.message
    return errors.shorten(redact(f"{type(exc).__name__}: {exc}"), errors.MAX_MESSAGE_CHARS)


def _detail(status: Status) -> str:
    return "" if status.error_code == "OK" else f"; error: {status.error_message}"


class ModelManager:
    def __init__(self, settings: Settings) -> None:
        self.host = Host.of(settings.concurrent, settings.sequence_cleaner_minutes)
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
            reopened = {
                m.name
                for m in config.models
                if (m.name not in current or current[m.name].config != m)
                and self._broken.get(m.name) != m
            }
            for model_config in config.models:
                if model_config.name in reopened:
                    current[model_config.name] = self._open(model_config)
            changed = bool(reopened)
            for model_config in config.models:
                changed |= current[model_config.name].sync(load=not self.settings.lazy_load)
            current = self._keep_old_when_broken(current, reopened)
            names = {m.name for m in config.models}
            outgoing = [m for n, m in self.models.items() if n not in names or current[n] is not m]
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
                log.error(
                    "Model %s: the new config failed to load; the previous config keeps serving",
                    name,
                )
                self._broken[name] = new.config
                current[name] = old
            else:
                self._broken.pop(name, None)
        return current

    def _apply_pipelines(self, config: ServerConfig, reopened: set[str]) -> bool:
        libraries = {lib.name: self._library(lib.name, lib.base_path) for lib in config.libraries}
        pipelines: dict[str, ServedPipeline] = {}
        self.pipeline_errors = {}
        for pipeline_config in config.pipelines:
            name = pipeline_config.name
            old = self.pipelines.get(name)
            models = {n.model_name for n in pipeline_config.nodes if n.model_name}
            intact = models <= set(self.models) and not models & reopened
            if old is not None and old.config == pipeline_config and intact:
                pipelines[name] = old
                continue
            try:
                pipeline = Pipeline(pipeline_config, self, libraries, set(self.models))
            except errors.ServingError as exc:
                log.error("Pipeline %s is invalid: %s", name, exc.message)
                self.pipeline_errors[name] = exc.message
                if old is not None and models <= set(self.models):
                    pipelines[name] = old  # the previous definition keeps serving
                continue
            pipelines[name] = ServedPipeline(pipeline_config, pipeline)
        outgoing = [p for n, p in self.pipelines.items() if pipelines.get(n) is not p]
        self.pipelines = pipelines
        for served in outgoing:  # after a grace, so requests running on it finish
            timer = threading.Timer(RETIRE_GRACE_S, served.pipeline.retire)
            timer.daemon = True
            timer.start()
        return bool(outgoing) or len(pipelines) != len(config.pipelines)

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
            repository = _Unreadable(config.base_path, _cause(exc))
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

    def model(self, name: str) -> ServedModel | ServedPipeline:
        served = self.models.get(name) or self.pipelines.get(name) or self.retired.get(name)
        if served is None:
            if name in self.pipeline_errors:
                raise errors.ModelNotReadyError(
                    f"Pipeline {name} is not loaded: {self.pipeline_errors[name]}"
                )
            raise errors.ModelNotFoundError(name)
        return served

    def get(self, name: str, version: int | None = None) -> Any:
        """The AVAILABLE servable a request should run on, or the error a client should see."""
        served = self.model(name)
        if (
            self.settings.lazy_load
            and isinstance(served, ServedModel)
            and served is not self.retired.get(name)
        ):
            served.ensure_loaded()
        return served.version(version)


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
