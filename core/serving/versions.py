"""Every version of one model name: the version policy applied to what the repository holds,
sync (load beside, then publish), auto-shape reloads, and retirement.

Serving state changes atomically: a new version is loaded beside the serving ones and only
then published (copy-on-write dict swap); a removed or replaced version is retired after its
in-flight requests finish; a replacement that fails to load leaves the old one serving.
Readers never take a lock on the hot path.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core import errors, metrics
from core.config import ModelConfig
from core.runtime import auto_shape, background
from core.runtime.blobs import BlobCache
from core.runtime.host import Host
from core.serving.model import ModelVersion
from core.serving.servable import State, Status
from core.storage import Repository, VersionFiles
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
    # version -> (its status before, the status saying a changed config failed): see
    # keep_serving_despite
    _kept: dict[int, tuple[Status, Status]] = field(default_factory=dict)

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

    def failure(self) -> str:
        """Why no version of this model is AVAILABLE, in the words its status carries."""
        if self.error:
            return self.error
        failed = [v.status for _, v in sorted(self.versions.items()) if v.status.error_code != "OK"]
        return failed[-1].error_message if failed else "No version is available"

    def keep_serving_despite(self, failure: str) -> None:
        """A changed config of this model failed to load and this one keeps serving: its
        AVAILABLE versions' status carries the failure until the config changes again."""
        message = (
            f"The changed config failed to load ({failure}); the previous config keeps serving"
        )
        for number, version in self.versions.items():
            if version.available:
                before = self._kept[number][0] if number in self._kept else version.status
                version.status = Status(State.AVAILABLE, "UNKNOWN", message)
                self._kept[number] = (before, version.status)

    def config_restored(self) -> None:
        """The config is this model's own again: its versions' status no longer carries the
        failure of the changed one (unless something else changed that status since)."""
        for number, (before, failed) in self._kept.items():
            version = self.versions.get(number)
            if version is not None and version.status is failed:
                version.status = before
        self._kept = {}

    def list_retiring(self, old: ServedModel) -> None:
        """List the versions of `old` (the model this one replaces) that this one lacks: they
        retire with `old`, and show UNLOADING then END in the status, as OVMS keeps a version
        a policy change drops."""
        with self._lock:
            dropped = {n: v for n, v in old.versions.items() if n not in self.versions}
            self.versions = dict(sorted({**self.versions, **dropped}.items()))

    def release_all(self) -> None:
        """Never published: give back the files its versions fetched."""
        for version in self.versions.values():
            self.repository.release(version.files)

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
                self.error = errors.relative(cause(exc), self.config.base_path)
                log.error("Model %s: %s", self.name, cause(exc))
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
                State.LOADING, "UNKNOWN", errors.relative(cause(exc), self.config.base_path)
            )
            log.error("Model %s version %d: %s", self.name, number, cause(exc))
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
        _unless_retired(
            current,
            Status(
                State.AVAILABLE,
                "OK",
                f"Reloading for {fit.describe()} (auto); this version serves meanwhile",
            ),
        )
        try:
            version.load()
        except BaseException:  # load() reports what it expects; anything else: as it was
            _unless_retired(current, serving)
            raise
        if not version.available:
            message = (
                f"Reload for {fit.describe()} failed: {version.status.error_message}; "
                "the current shape keeps serving"
            )
            _unless_retired(current, Status(State.AVAILABLE, version.status.error_code, message))
            raise errors.InvalidInputError(
                f"Model could not be reloaded for the request's shape: {fit.describe()}"
            )
        version.timings["auto_reload_s"] = time.perf_counter() - started
        metrics.AUTO_RELOADS.labels(self.name, str(current.version)).inc()
        with self._lock:
            published = self.versions.get(current.version) is current and current.available
            if published:
                self.versions = {**self.versions, current.version: version}
        if published:
            self._retire(current, release=False)
            return version
        # replaced by a sync, or retired with its model, meanwhile: the fitted version is not
        # published; it answers the request that asked for it while it drains
        self._retire(version, release=False)
        return version

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

            # the exit waits for a drain: it releases OpenVINO objects
            background.start(drain, f"retire-{version.name}-{version.version}")


def _unless_retired(version: ModelVersion, status: Status) -> None:
    """Set a serving version's status, unless it was retired meanwhile (UNLOADING, END)."""
    if version.status.state is State.AVAILABLE:
        version.status = status


def _version_class(config: ModelConfig, folder: Path | None = None) -> type[ModelVersion]:
    if config.task or (folder is not None and (folder / "graph.pbtxt").is_file()):
        from core.openai.servable import TextModelVersion

        return TextModelVersion  # embeddings / rerank (OVMS's export layout)
    if config.stateful:
        from core.serving.stateful import StatefulModelVersion

        return StatefulModelVersion
    return ModelVersion


def _same_failure(old: ModelVersion | None, new: ModelVersion) -> bool:
    """A retried version that failed again exactly as before: nothing changed."""
    return old is not None and new.status.error_code != "OK" and old.status == new.status


def cause(exc: Exception) -> str:
    """A failure in the words a status carries: a ServingError's message, else its type and
    text (redacted: it may come from inside a storage SDK)."""
    if isinstance(exc, errors.ServingError):
        return exc.message
    return errors.shorten(redact(f"{type(exc).__name__}: {exc}"), errors.MAX_MESSAGE_CHARS)


def _detail(status: Status) -> str:
    return "" if status.error_code == "OK" else f"; error: {status.error_message}"
