"""A model repository in a bucket, over any provider's client (core.storage.backend.Backend):

versions()  one recursive listing under the prefix, grouped by the first path segment;
            a version's fingerprint hashes (relative key, etag/generation, size) of its files
            (not of its compiled blobs, .ov-compiled/*.blob: see fetch)
fetch(v)    <cache_dir>/<scheme>/<bucket>/<prefix>/<v>-<fingerprint>/, downloaded file by
            file on a thread pool into a hidden temp folder beside it and renamed into place
            only when complete, so a partial download is never visible; an existing folder
            with the same fingerprint is reused as is. A version of PROGRESS_MIN_BYTES or
            more logs its progress (core.storage.folders). Compiled blobs stay in the
            bucket: there may be one per kind of CPU, and a load downloads only the one with
            its host's key. When there are blobs, big weight files (DEFER_MIN_BYTES) stay
            there too until a load compiles: one that imports its blob never downloads
            them. What stayed behind travels in the returned BucketVersionFiles.
release(f)  the version that fetched f ended: once no version in the process uses its
            folder, it is deleted (core.storage.folders.Folders)
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath

from core.storage import BLOB_FOLDER, GRAPH_SUFFIXES, VersionFiles, version_number
from core.storage.backend import MAX_WORKERS, Backend, RemoteObject, below, relative_key
from core.storage.folders import (
    FOLDERS,
    Progress,
    cache_path,
    disk_full,
    no_space,
    publish,
)
from core.storage.secrets import StorageError

log = logging.getLogger("ov_serverless.storage")

# With compiled blobs listed, weight files this big are downloaded only by a load that compiles
# (smaller ones cost less to download with the graph than as a second round trip).
DEFER_MIN_BYTES = 4 << 20


def fingerprint(objects: Iterable[RemoteObject], base: str) -> str:
    digest = hashlib.blake2b(digest_size=10)
    for obj in sorted(objects, key=lambda o: o.key):
        rel = below(obj.key, base)  # checked by the fetch: a bad key fails its version there
        digest.update(f"{rel}\0{obj.tag}\0{obj.size}\n".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def is_folder_marker(obj: RemoteObject) -> bool:
    return obj.key.endswith("/")


def split_blobs(
    objects: Iterable[RemoteObject], base: str
) -> tuple[list[RemoteObject], dict[str, RemoteObject]]:
    """A version's objects -> (its model files, its compiled blobs by file name). Blobs are
    not part of the download nor of the fingerprint: there may be one per kind of CPU, and a
    load fetches only the one with its host's key (BucketVersionFiles.blob)."""
    files: list[RemoteObject] = []
    blobs: dict[str, RemoteObject] = {}
    for obj in objects:
        head, _, name = below(obj.key, base).partition("/")
        if head == BLOB_FOLDER and name.endswith(".blob") and "/" not in name and "\0" not in name:
            blobs[name] = obj
        else:
            files.append(obj)
    return files, blobs


def can_wait(obj: RemoteObject) -> bool:
    """A weight file a load that imports a compiled blob does not read."""
    return obj.size >= DEFER_MIN_BYTES and PurePosixPath(obj.key).suffix not in GRAPH_SUFFIXES


class BucketRepository:
    """The Repository protocol over a Backend; see the module docstring. `connect` builds a
    new backend for renew() (a snapshot restore); without it the backend is kept."""

    def __init__(
        self,
        url: str,
        backend: Backend,
        prefix: str,
        cache_dir: Path,
        connect: Callable[[], Backend] | None = None,
    ) -> None:
        self.url = url
        self.backend = backend
        self.prefix = prefix
        self.cache_root = cache_path(cache_dir, backend.scheme, backend.bucket, *prefix.split("/"))
        self._connect = connect

    @classmethod
    def connected(
        cls, url: str, connect: Callable[[], Backend], prefix: str, cache_dir: Path
    ) -> BucketRepository:
        """A repository whose backend `connect()` builds, now and again on renew()."""
        return cls(url, connect(), prefix, cache_dir, connect)

    def renew(self) -> None:
        """A new client from the environment as it is now (core.storage.renew_client)."""
        if self._connect is not None:
            self.backend = self._connect()

    def _key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def versions(self) -> dict[int, str]:
        groups: dict[int, list[RemoteObject]] = {}
        seen_any = False
        base = self._key() + "/" if self.prefix else ""
        for obj in self.backend.list_objects(base):
            seen_any = True
            head, sep, _ = obj.key[len(base) :].partition("/")
            number = version_number(head)
            if sep and number is not None and not is_folder_marker(obj):
                groups.setdefault(number, []).append(obj)
        if not seen_any:
            raise StorageError(f"The provided base path is invalid or doesn't exists: {self.url}")
        return {
            v: fingerprint(split_blobs(objs, self._key(str(v)))[0], self._key(str(v)))
            for v, objs in sorted(groups.items())
        }

    def fetch(self, version: int) -> BucketVersionFiles:
        started = time.perf_counter()
        base = self._key(str(version))
        listed = [o for o in self.backend.list_objects(base + "/") if not is_folder_marker(o)]
        objects, blobs = split_blobs(listed, base)
        if not objects:
            raise StorageError(f"Version folder is missing: {self.url.rstrip('/')}/{version}")
        target = self.cache_root / f"{version}-{fingerprint(objects, base)}"
        files = {relative_key(o.key, base): o for o in objects}
        _refuse_file_and_folder(files)
        later = {rel: o for rel, o in files.items() if blobs and can_wait(o)}
        now = {rel: o for rel, o in files.items() if rel not in later}
        FOLDERS.acquire(target)  # before the check: a release cannot delete it under us
        try:
            cached = target.is_dir()
            if not cached:
                self._download_all(
                    list(now.values()), base, target, f"{self.url.rstrip('/')}/{version}"
                )
            else:  # weights an earlier fetch left in the bucket are needed now (no blobs)
                self.fill(target, now)
        except BaseException:
            FOLDERS.release(target)
            raise
        log.info(
            "model version ready",
            extra={
                "url": self.url,
                "version": version,
                "files": len(now),
                "bytes": sum(o.size for o in now.values()),
                "left_in_bucket": len(later),
                "seconds": round(time.perf_counter() - started, 3),
                "cached": cached,
                "path": str(target),
            },
        )
        return BucketVersionFiles(target, self, files, blobs, later)

    def release(self, files: VersionFiles) -> None:
        FOLDERS.release(files.folder)

    def fill(self, folder: Path, files: dict[str, RemoteObject]) -> None:
        """Download into `folder` (relative path -> object) those not there yet, in parallel."""
        _each(
            self.place,
            [(o, folder / rel) for rel, o in files.items() if not (folder / rel).is_file()],
        )

    def place(self, obj: RemoteObject, dest: Path) -> None:
        """One object into dest (atomic: a temp file beside it, renamed when complete); any
        failure is a StorageError."""
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            handle, temp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
            os.close(handle)
            try:
                self._download_one(obj, Path(temp))
                os.replace(temp, dest)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp)
        except OSError as exc:
            url = f"{self.backend.scheme}://{self.backend.bucket}/{obj.key}"
            raise write_error(url, exc, obj.size) from exc

    def _download_all(
        self, objects: list[RemoteObject], base: str, target: Path, label: str
    ) -> None:
        total = sum(o.size for o in objects)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        except OSError as exc:
            raise write_error(label, exc, total) from exc
        try:
            jobs = [(o, tmp / relative_key(o.key, base)) for o in objects]
            with Progress(label, tmp, total):
                _each(self._download_one, jobs)
            publish(tmp, target)
        except OSError as exc:
            raise write_error(label, exc, total, tmp) from exc
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def _download_one(self, obj: RemoteObject, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        self.backend.download(obj, dest)
        got = dest.stat().st_size
        if got != obj.size:
            raise StorageError(
                f"Incomplete download of {self.backend.scheme}://{self.backend.bucket}/"
                f"{obj.key}: {got} of {obj.size} bytes"
            )


class BucketVersionFiles(VersionFiles):
    """A bucket's version: its folder, what the bucket listed for it, and what the fetch left
    there, downloaded only when a load needs it: its compiled blobs, one at a time by key
    (core.runtime.blobs.BlobCache.find, into <folder>/.ov-compiled/), and its big weight files, by a
    load that compiles (complete). The blob key names weight files by their listed tags
    (listed_weights), so it needs none of them on disk."""

    def __init__(
        self,
        folder: Path,
        repository: BucketRepository,
        files: dict[str, RemoteObject],
        blobs: dict[str, RemoteObject],
        weights: dict[str, RemoteObject],
    ) -> None:
        super().__init__(folder)
        self.repository = repository  # its backend may be renewed: always read it from there
        self.files = files  # the model's files, by path relative to the folder
        self.blobs = blobs  # compiled blobs, by file name
        self.weights = weights  # files left in the bucket until a load compiles

    def listed_weights(self) -> dict[str, tuple[int, str]]:
        return {
            rel: (o.size, o.tag)
            for rel, o in self.files.items()
            if PurePosixPath(rel).suffix not in GRAPH_SUFFIXES
        }

    def blob(self, name: str) -> Path | None:
        """As VersionFiles.blob; None too when the download fails (logged: the load compiles
        instead)."""
        obj = self.blobs.get(name)
        if obj is None:
            return None
        dest = self.folder / BLOB_FOLDER / name
        started = time.perf_counter()
        try:
            cached = self._place(obj, dest)
        except StorageError as exc:
            log.warning("Compiled blob not downloaded, compiling instead: %s", exc.message)
            return None
        log.info(
            "compiled blob ready",
            extra={
                "url": self.repository.url,
                "bytes": obj.size,
                "path": str(dest),
                "cached": cached,
                "seconds": round(time.perf_counter() - started, 3),
            },
        )
        return dest

    def complete(self) -> None:
        missing = {rel: o for rel, o in self.weights.items() if not (self.folder / rel).is_file()}
        if not missing:
            return
        started = time.perf_counter()
        total = sum(o.size for o in missing.values())
        with Progress(self.repository.url, self.folder, total):
            _each(self._place, [(o, self.folder / rel) for rel, o in missing.items()])
        log.info(
            "model weights ready",
            extra={
                "url": self.repository.url,
                "files": len(missing),
                "bytes": total,
                "path": str(self.folder),
                "cached": False,
                "seconds": round(time.perf_counter() - started, 3),
            },
        )

    def _place(self, obj: RemoteObject, dest: Path) -> bool:
        """Download obj to dest unless it is there; True when it was (cached)."""
        with FOLDERS.download_lock(dest):
            if dest.is_file():
                return True
            self.repository.place(obj, dest)
            return False


def write_error(what: str, exc: OSError, needed: int, folder: Path | None = None) -> StorageError:
    """A failed write into the cache in words a client may read: `what` (a URL), the file
    below `folder` (a version's download folder) it failed on, and the cause; never the cache
    dir's path, which goes to the log for the operator."""
    if disk_full(exc):
        return no_space(what, needed)
    log.warning("Cannot write into the cache dir for %s: %s", what, exc)
    name = _below(exc.filename2 or exc.filename, folder)
    where = f" (file {name!r})" if name else ""
    cause = exc.strerror or type(exc).__name__
    return StorageError(f"Cannot write {what} into the cache dir{where}: {cause}")


def _below(path: object, folder: Path | None) -> str:
    """`path` relative to `folder` when it is a path inside it, else ''."""
    if folder is None or not isinstance(path, str):
        return ""
    root = os.path.abspath(folder)
    if os.path.commonpath([root, os.path.abspath(path)]) != root:
        return ""
    return os.path.relpath(path, root)


def _refuse_file_and_folder(files: dict[str, RemoteObject]) -> None:
    """StorageError for a key below another object's name ('1/model.bin' and
    '1/model.bin/x'): one name cannot be a file and a folder in the cache."""
    for rel, obj in sorted(files.items()):
        parts = rel.split("/")
        for end in range(1, len(parts)):
            if "/".join(parts[:end]) in files:
                raise StorageError(
                    f"Refusing object key {obj.key!r}: "
                    f"{obj.key.removesuffix(rel) + '/'.join(parts[:end])!r} is an object too, "
                    "and a name cannot be both a file and a folder"
                )


def _each(
    download: Callable[[RemoteObject, Path], object], jobs: list[tuple[RemoteObject, Path]]
) -> None:
    """download(obj, dest) for every job, MAX_WORKERS at a time; the first failure is raised
    once the pool has waited for the rest."""
    if jobs:
        with ThreadPoolExecutor(min(MAX_WORKERS, len(jobs))) as pool:
            list(pool.map(lambda job: download(*job), jobs))
