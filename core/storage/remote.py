"""What every bucket backend shares: URL parsing, versions + fingerprints, atomic download.

A backend (s3.py, gcs.py, azure.py) only lists objects, downloads one object to a path and
reads one object's bytes, raising StorageError (naming the URL and the cause) for any SDK
failure. `RemoteRepository` turns that into the Repository protocol:

    versions()  one recursive listing under the prefix, grouped by the first path segment;
                a version's fingerprint hashes (relative key, etag/generation, size) of its files
                (not of its compiled blobs, .ov-compiled/*.blob: see fetch)
    fetch(v)    <cache_dir>/<scheme>/<bucket>/<prefix>/<v>-<fingerprint>/, downloaded file by
                file on a thread pool into a hidden temp folder beside it and renamed into place
                only when complete, so a partial download is never visible; an existing folder
                with the same fingerprint is reused as is. A version of PROGRESS_MIN_BYTES or
                more logs its progress (bytes on disk so far, MB/s) every PROGRESS_INTERVAL_S.
                Compiled blobs stay in the bucket: there may be one per kind of CPU, and a load
                downloads only the one with its host's key (LAZY, from core.compiled_cache).
                When there are blobs, big weight files (DEFER_MIN_BYTES) stay there too until a
                load compiles: one that imports its blob never downloads them.
    release(f)  the version that fetched f ended: once no version in the process uses f,
                it is deleted (Folders)
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Protocol

from core import errors
from core.storage import BLOB_FOLDER, GRAPH_SUFFIXES, version_number
from core.storage.secrets import StorageError, redact

log = logging.getLogger("ov_serverless.storage")

# Short enough that a dead endpoint fails in seconds, not minutes; reads may be slow (big .bin).
CONNECT_TIMEOUT_S = 3.0
READ_TIMEOUT_S = 30.0
RETRIES = 2  # retries after the first attempt, with sub-second to ~2 s backoff
MAX_WORKERS = 8
# A download this big (a version's files together) reports progress while it runs.
PROGRESS_MIN_BYTES = 50 << 20
PROGRESS_INTERVAL_S = 2.0
# With compiled blobs listed, weight files this big are downloaded only by a load that compiles
# (smaller ones cost less to download with the graph than as a second round trip).
DEFER_MIN_BYTES = 4 << 20
# A write that fails for want of room: reported as such at once, never retried.
DISK_FULL = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})


@dataclass(frozen=True)
class RemoteObject:
    key: str  # full object key / blob name
    size: int
    tag: str  # ETag, generation, content MD5: whatever changes when the content does
    # digests the listing gave, in the backend's own words (core.storage.checksums): the
    # integrity check of a download whose answer names none
    hashes: str = field(default="", compare=False)


class Backend(Protocol):
    """One bucket (container) of one provider, reached through its official SDK."""

    scheme: str  # canonical scheme used in cache paths: "s3", "gs", "az"
    bucket: str

    def list_objects(self, prefix: str) -> Iterator[RemoteObject]:
        """Every object whose key starts with `prefix` (recursively)."""
        ...

    def download(self, obj: RemoteObject, dest: Path) -> None: ...

    def read(self, key: str) -> bytes: ...


def split_url(url: str, schemes: Iterable[str]) -> tuple[str, str]:
    """`scheme://bucket/some/prefix/` -> ("bucket", "some/prefix")."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in set(schemes):
        raise StorageError(f"Not a {'/'.join(schemes)} URL: {url}")
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise StorageError(f"Missing bucket name in {url}")
    return check_path(bucket, url), check_path(prefix.strip("/"), url)


def check_path(path: str, url: str) -> str:
    """`path` (a bucket name, a prefix, a key) when every '/'-segment is a plain name: '.',
    '..', an empty segment, a backslash or a NUL would name another place in a bucket than the
    one written, or leave the cache dir once joined into a local path (ConfigError)."""
    for segment in path.split("/") if path else ():
        problem = ("an empty path segment" if not segment
                   else "a NUL character" if "\0" in segment
                   else "a backslash" if "\\" in segment
                   else f"the path segment {segment!r}" if segment in (".", "..") else "")
        if problem:
            raise errors.ConfigError(redact(
                f"Invalid bucket URL {url!r}: {problem}; a bucket URL takes no '.', '..' or "
                "empty path segments, backslashes or NUL characters"))
    return path


def object_key(key: str, url: str) -> str:
    """The key of a single-file URL (a config.json in a bucket); a bare bucket is an error."""
    if not key:
        raise StorageError(f"Missing object key in {url}")
    return check_path(key, url)


def fingerprint(objects: Iterable[RemoteObject], base: str) -> str:
    digest = hashlib.blake2b(digest_size=10)
    for obj in sorted(objects, key=lambda o: o.key):
        rel = _below(obj.key, base)  # checked by the fetch: a bad key fails its version there
        digest.update(f"{rel}\0{obj.tag}\0{obj.size}\n".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def relative_key(key: str, base: str) -> str:
    """`key` below `base` (both without a leading slash); refuses keys that are not below it,
    or whose path would leave it or cannot be a file name ('.', '..', empty, NUL)."""
    rel = key.removeprefix(base.rstrip("/") + "/") if base else key
    parts = rel.split("/")
    if (base and rel == key) or any(p in ("", ".", "..") or "\0" in p for p in parts):
        shown = key.replace("\0", "\\0")
        raise StorageError(f"Refusing object key that leaves its version folder or cannot be a "
                           f"file name: {shown!r}")
    return rel


def _below(key: str, base: str) -> str:
    """`key` less `base` and the '/' after it, unchecked (see relative_key)."""
    return key[len(base):].removeprefix("/") if base else key


def cache_path(cache_dir: Path, *parts: str) -> Path:
    """cache_dir/parts..., refused (StorageError) unless it stays inside cache_dir once
    resolved: a URL check that missed a case, or a symlink in the cache, cannot write
    elsewhere."""
    path = Path(cache_dir, *parts)
    try:
        root = os.path.realpath(cache_dir)
        inside = os.path.commonpath([root, os.path.realpath(path)]) == root
    except ValueError:  # a NUL
        inside = False
    if not inside:
        raise StorageError(f"Refusing the cache folder {'/'.join(parts)!r}: it resolves outside "
                           "the cache dir")
    return path


def disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_FULL


def no_space(url: str, needed: int) -> StorageError:
    return StorageError(f"Cannot download {url}: no space left in the cache dir "
                        f"({needed / 1e6:.1f} MB needed)")


def is_folder_marker(obj: RemoteObject) -> bool:
    return obj.key.endswith("/")


def split_blobs(objects: Iterable[RemoteObject], base: str
                ) -> tuple[list[RemoteObject], dict[str, RemoteObject]]:
    """A version's objects -> (its model files, its compiled blobs by file name). Blobs are
    not part of the download nor of the fingerprint: there may be one per kind of CPU, and a
    load fetches only the one with its host's key (Blobs)."""
    files: list[RemoteObject] = []
    blobs: dict[str, RemoteObject] = {}
    for obj in objects:
        head, _, name = _below(obj.key, base).partition("/")
        if (head == BLOB_FOLDER and name.endswith(".blob") and "/" not in name
                and "\0" not in name):
            blobs[name] = obj
        else:
            files.append(obj)
    return files, blobs


def can_wait(obj: RemoteObject) -> bool:
    """A weight file a load that imports a compiled blob does not read."""
    return obj.size >= DEFER_MIN_BYTES and PurePosixPath(obj.key).suffix not in GRAPH_SUFFIXES


class RemoteRepository:
    """Repository protocol over a Backend; see the module docstring."""

    def __init__(self, url: str, backend: Backend, prefix: str, cache_dir: Path) -> None:
        self.url = url
        self.backend = backend
        self.prefix = prefix
        self.cache_root = cache_path(cache_dir, backend.scheme, backend.bucket,
                                     *prefix.split("/"))

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
        return {v: fingerprint(split_blobs(objs, self._key(str(v)))[0], self._key(str(v)))
                for v, objs in sorted(groups.items())}

    def fetch(self, version: int) -> Path:
        started = time.perf_counter()
        base = self._key(str(version))
        listed = [o for o in self.backend.list_objects(base + "/") if not is_folder_marker(o)]
        objects, blobs = split_blobs(listed, base)
        if not objects:
            raise StorageError(f"Version folder is missing: {self.url.rstrip('/')}/{version}")
        target = self.cache_root / f"{version}-{fingerprint(objects, base)}"
        files = {relative_key(o.key, base): o for o in objects}
        later = {rel: o for rel, o in files.items() if blobs and can_wait(o)}
        now = {rel: o for rel, o in files.items() if rel not in later}
        FOLDERS.acquire(target)  # before the check: a release cannot delete it under us
        try:
            cached = target.is_dir()
            if not cached:
                self._download_all(list(now.values()), base, target,
                                   f"{self.url.rstrip('/')}/{version}")
            else:  # weights an earlier fetch left in the bucket are needed now (no blobs)
                self.fill(target, now)
        except BaseException:
            FOLDERS.release(target)
            raise
        LAZY.offer(target, self, files, blobs, later)
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
        return target

    def release(self, folder: Path) -> None:
        FOLDERS.release(folder)
        LAZY.forget(folder, unless=FOLDERS.holds)

    def fill(self, folder: Path, files: dict[str, RemoteObject]) -> None:
        """Download into `folder` (relative path -> object) those not there yet, in parallel."""
        _each(self.place, [(o, folder / rel) for rel, o in files.items()
                           if not (folder / rel).is_file()])

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
            if disk_full(exc):
                raise no_space(self.url, obj.size) from exc
            raise StorageError(f"Cannot write {dest} for {self.url}: {exc}") from exc

    def _download_all(
        self, objects: list[RemoteObject], base: str, target: Path, label: str
    ) -> None:
        total = sum(o.size for o in objects)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        except OSError as exc:
            if disk_full(exc):
                raise no_space(label, total) from exc
            raise StorageError(f"Cannot create cache folder {target.parent}: {exc}") from exc
        try:
            jobs = [(o, tmp / relative_key(o.key, base)) for o in objects]
            with Progress(label, tmp, total):
                _each(self._download_one, jobs)
            _publish(tmp, target)
        except OSError as exc:
            if disk_full(exc):
                raise no_space(label, total) from exc
            raise StorageError(f"Cannot write {target} for {self.url}: {exc}") from exc
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


class Progress:
    """While a big download runs, log the bytes already on disk under `folder` every
    PROGRESS_INTERVAL_S. Costs one thread and a directory scan per interval, nothing per chunk;
    SDK temp files (s3transfer writes `<name>.<random>`) are counted too."""

    def __init__(self, label: str, folder: Path, total: int) -> None:
        self.label = label
        self.folder = folder
        self.total = total
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Progress:
        if self.total >= PROGRESS_MIN_BYTES:
            self._thread = threading.Thread(target=self._run, name="download-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        started = time.perf_counter()
        while not self._done.wait(PROGRESS_INTERVAL_S):
            done = min(_bytes_under(self.folder), self.total)
            elapsed = time.perf_counter() - started
            rate = done / elapsed / 1e6 if elapsed > 0 else 0.0
            log.info(
                "downloading %s: %.1f of %.1f MB (%d%%), %.1f MB/s",
                self.label,
                done / 1e6,
                self.total / 1e6,
                100 * done // max(self.total, 1),
                rate,
                extra={
                    "url": self.label,
                    "bytes_done": done,
                    "bytes_total": self.total,
                    "mb_per_s": round(rate, 1),
                },
            )


class Folders:
    """The downloaded version folders in use, counted per process (two models may name the same
    bucket path) and across processes by a shared flock on a lock file beside each folder (two
    gunicorn workers, or pods, on one cache volume). The last user deletes the folder: a
    long-lived instance that sees many versions come and go would otherwise fill its disk (/tmp
    is small on Lambda)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: dict[Path, int] = {}
        self._locks: dict[Path, int] = {}  # folder -> fd holding LOCK_SH on its lock file

    def acquire(self, folder: Path) -> None:
        with self._lock:
            if folder not in self._users:
                self._locks[folder] = _shared_lock(_lock_file(folder))
            self._users[folder] = self._users.get(folder, 0) + 1

    def holds(self, folder: Path) -> bool:
        with self._lock:
            return folder in self._users

    def release(self, folder: Path) -> None:
        with self._lock:
            count = self._users.pop(folder, 0)
            if count > 1:
                self._users[folder] = count - 1
                return
            fd = self._locks.pop(folder, None)
            if fd is None:
                return
            try:
                gone = _take(folder, fd)
            finally:
                os.close(fd)
        if gone is not None:
            shutil.rmtree(gone, ignore_errors=True)
            log.info("removed cached version folder", extra={"path": str(folder)})


@dataclass
class _Listed:
    repository: RemoteRepository
    files: dict[str, RemoteObject]  # the model's files, by path relative to the folder
    blobs: dict[str, RemoteObject]  # compiled blobs, by file name
    weights: dict[str, RemoteObject]  # files left in the bucket until a load compiles


class LazyFiles:
    """What the bucket listed for each downloaded version folder, and what the folder left
    there, downloaded only when a load needs it: its compiled blobs, one at a time by key
    (core.compiled_cache.find, into <folder>/.ov-compiled/), and its big weight files, by a
    load that compiles (complete). The blob key names weight files by their listed tags
    (tags), so it needs none of them on disk."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._downloads: dict[Path, threading.Lock] = {}  # one download per file at once
        self._listed: dict[Path, _Listed] = {}

    def offer(self, folder: Path, repository: RemoteRepository, files: dict[str, RemoteObject],
              blobs: dict[str, RemoteObject], weights: dict[str, RemoteObject]) -> None:
        with self._lock:
            self._listed[folder] = _Listed(repository, files, blobs, weights)

    def forget(self, folder: Path, unless: Callable[[Path], bool]) -> None:
        """Drop the folder's listing unless `unless(folder)` (another fetch holds it): checked
        under the lock an offer takes, so a fetch that acquires the folder just now keeps it."""
        with self._lock:
            if unless(folder):
                return
            self._listed.pop(folder, None)
            for dest in [d for d in self._downloads if d.is_relative_to(folder)]:
                del self._downloads[dest]

    def blob(self, folder: Path, name: str) -> Path | None:
        """<folder>/.ov-compiled/<name>, downloaded if the bucket lists it; None when it does
        not, or the download fails (logged: the load compiles instead)."""
        listed = self._get(folder)
        obj = listed.blobs.get(name) if listed else None
        if listed is None or obj is None:
            return None
        dest = folder / BLOB_FOLDER / name
        started = time.perf_counter()
        try:
            cached = self._place(listed.repository, obj, dest)
        except StorageError as exc:
            log.warning("Compiled blob not downloaded, compiling instead: %s", exc.message)
            return None
        log.info("compiled blob ready", extra={
            "url": listed.repository.url, "bytes": obj.size, "path": str(dest), "cached": cached,
            "seconds": round(time.perf_counter() - started, 3)})
        return dest

    def tags(self, folder: Path) -> dict[str, tuple[int, str]]:
        """The folder's weight files (not graph files) as listed: path -> (size, tag); empty
        for a folder not fetched from a bucket."""
        listed = self._get(folder)
        if listed is None:
            return {}
        return {rel: (o.size, o.tag) for rel, o in listed.files.items()
                if PurePosixPath(rel).suffix not in GRAPH_SUFFIXES}

    def complete(self, folder: Path) -> None:
        """Download the weight files still in the bucket (a load is about to compile)."""
        listed = self._get(folder)
        if listed is None:
            return
        missing = {rel: o for rel, o in listed.weights.items() if not (folder / rel).is_file()}
        if not missing:
            return
        started = time.perf_counter()
        total = sum(o.size for o in missing.values())
        with Progress(listed.repository.url, folder, total):
            _each(lambda obj, dest: self._place(listed.repository, obj, dest),
                  [(o, folder / rel) for rel, o in missing.items()])
        log.info("model weights ready", extra={
            "url": listed.repository.url, "files": len(missing), "bytes": total,
            "path": str(folder), "cached": False,
            "seconds": round(time.perf_counter() - started, 3)})

    def _get(self, folder: Path) -> _Listed | None:
        with self._lock:
            return self._listed.get(folder)

    def _place(self, repository: RemoteRepository, obj: RemoteObject, dest: Path) -> bool:
        """Download obj to dest unless it is there; True when it was (cached)."""
        with self._lock:
            lock = self._downloads.setdefault(dest, threading.Lock())
        with lock:
            if dest.is_file():
                return True
            repository.place(obj, dest)
            return False


LAZY = LazyFiles()


def _each(download: Callable[[RemoteObject, Path], object],
          jobs: list[tuple[RemoteObject, Path]]) -> None:
    """download(obj, dest) for every job, MAX_WORKERS at a time; the first failure is raised
    once the pool has waited for the rest."""
    if jobs:
        with ThreadPoolExecutor(min(MAX_WORKERS, len(jobs))) as pool:
            list(pool.map(lambda job: download(*job), jobs))


def _lock_file(folder: Path) -> Path:
    return folder.with_name(f".{folder.name}.lock")


def _shared_lock(path: Path) -> int:
    """An fd holding LOCK_SH on `path`, the file now at that path (the last user unlinks it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while another process deletes the folder
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        os.close(fd)  # unlinked by the process that just deleted the folder: open the new one


def _take(folder: Path, fd: int) -> Path | None:
    """If no other process holds the folder's lock: rename the folder away (-> the new name),
    then unlink the lock file, both under LOCK_EX, so a fetch never sees half a folder."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return None  # another process still serves from it and deletes it when done
    away = folder.with_name(f".gone-{folder.name}-{os.getpid()}-{time.monotonic_ns()}")
    gone: Path | None = away
    try:
        os.rename(folder, away)
    except FileNotFoundError:  # a download that failed, or never started
        gone = None
    except OSError as exc:
        log.warning("Could not remove cached version folder %s: %s", folder, exc)
        return None
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_lock_file(folder))
    return gone


FOLDERS = Folders()


def _bytes_under(folder: Path) -> int:
    total = 0
    for root, _, names in os.walk(folder):
        for name in names:
            with contextlib.suppress(OSError):  # renamed or removed since the listing
                total += os.stat(os.path.join(root, name)).st_size
    return total


def _publish(tmp: Path, target: Path) -> None:
    """Atomically rename `tmp` to `target`; if another fetch got there first, keep theirs."""
    try:
        os.rename(tmp, target)
    except OSError:
        if not target.is_dir():
            raise
