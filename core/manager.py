"""The registry of servables: the warm compiled-model cache that lives for the process.

Serving state changes atomically: a new version is loaded beside the serving ones and only
then published (copy-on-write dict swap); a removed version is retired after its in-flight
requests finish. Readers never take a lock on the hot path.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from core import errors
from core.config import ModelConfig, ServerConfig, Settings
from core.model import ModelVersion, State, Status
from core.storage import Repository, open_repository

log = logging.getLogger("ov_serverless.manager")


@dataclass
class ServedModel:
    """Every version of one model name, with the config that produced them."""

    config: ModelConfig
    repository: Repository
    cache_dir: str
    versions: dict[int, ModelVersion] = field(default_factory=dict)
    fingerprints: dict[int, str] = field(default_factory=dict)
    error: str = ""  # why the repository itself could not be read, if it could not
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def name(self) -> str:
        return self.config.name

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
        no longer wanted are retired. Returns True when anything changed.
        """
        with self._lock:
            try:
                present = self.repository.versions()
            except errors.ServingError as exc:
                self.error = exc.message
                log.error("Model %s: %s", self.name, exc.message)
                return False
            self.error = "" if present else f"No version found in {self.config.base_path}"
            wanted = {v: present[v] for v in self.config.version_policy.select(list(present))}
            added = [v for v, fp in wanted.items() if self.fingerprints.get(v) != fp
                     or v not in self.versions or self.versions[v].status.state >= State.UNLOADING]
            removed = [v for v, version in self.versions.items()
                       if v not in wanted and version.status.state < State.UNLOADING]
            fresh = {v: self._prepare(v, load) for v in added}
            retired = [self.versions[v] for v in removed]
            replaced = [self.versions[v] for v in added if v in self.versions
                        and self.versions[v].status.state < State.UNLOADING]
            self.versions = {**self.versions, **fresh}
            self.fingerprints = {**self.fingerprints, **{v: wanted[v] for v in added}}
        for version in retired + replaced:
            threading.Thread(target=version.retire, daemon=True).start()
        return bool(added or removed)

    def _prepare(self, number: int, load: bool) -> ModelVersion:
        try:
            folder = self.repository.fetch(number)
        except errors.ServingError as exc:
            folder = Path()
            failed = ModelVersion(self.config, number, folder, self.cache_dir)
            failed.status = Status(State.LOADING, "UNKNOWN", exc.message)
            return failed
        version = ModelVersion(self.config, number, folder, self.cache_dir)
        if load:
            version.load()
        return version

    def ensure_loaded(self) -> None:
        """Lazy mode: compile versions on first use."""
        for version in list(self.versions.values()):
            if version.status.state is State.START:
                with self._lock:
                    if version.status.state is State.START:
                        version.load()


def _detail(status: Status) -> str:
    return "" if status.error_code == "OK" else f"; error: {status.error_message}"


class ModelManager:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.models: dict[str, ServedModel] = {}
        self.config: ServerConfig | None = None
        self.ready = False
        self.timings: dict[str, float] = {}
        self._reload_lock = threading.Lock()

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
            changed = False
            current = dict(self.models)
            for model_config in config.models:
                served = current.get(model_config.name)
                if served is None or served.config != model_config:
                    served = self._open(model_config)
                    changed = True
                changed |= served.sync(load=not self.settings.lazy_load)
                current[model_config.name] = served
            names = {m.name for m in config.models}
            gone = [self.models[n] for n in self.models if n not in names]
            self.models = {n: m for n, m in current.items() if n in names}
            self.config = config
        for served in gone:
            for version in served.versions.values():
                threading.Thread(target=version.retire, daemon=True).start()
        self.timings["config_apply_s"] = time.perf_counter() - started
        return changed or bool(gone)

    def _open(self, config: ModelConfig) -> ServedModel:
        cache = str(Path(self.settings.cache_dir) / "models")
        try:
            repository = open_repository(config.base_path, Path(cache))
        except errors.ServingError as exc:
            repository = _Unreadable(config.base_path, exc.message)
        return ServedModel(config, repository, self.settings.cache_dir)

    def reload(self) -> bool:
        """Re-read the config file (if any) and every repository; True when anything changed."""
        if self.settings.config_path:
            return self.apply(self.settings.server_config())
        changed = False
        for served in list(self.models.values()):
            changed |= served.sync(load=not self.settings.lazy_load)
        return changed

    def model(self, name: str) -> ServedModel:
        served = self.models.get(name)
        if served is None:
            raise errors.ModelNotFoundError(name)
        return served

    def get(self, name: str, version: int | None = None) -> ModelVersion:
        """The AVAILABLE version a request should run on, or the error a client should see."""
        served = self.model(name)
        if self.settings.lazy_load:
            served.ensure_loaded()
        return served.version(version)


class _Unreadable:
    """Stand-in repository for a base path that could not even be opened (bad scheme...)."""

    def __init__(self, url: str, message: str) -> None:
        self.url = url
        self.message = message

    def versions(self) -> dict[int, str]:
        raise errors.StorageError(self.message)

    def fetch(self, version: int) -> Path:
        raise errors.StorageError(self.message)
