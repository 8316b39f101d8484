"""The download cache a process shares: version folders under the cache dir, counted while in
use and deleted by their last user, written atomically and with progress logged, and the
words for a cache disk that is full.

Layout: <cache_dir>/<scheme>/<bucket>/<prefix>/<version>-<fingerprint>/, beside it a lock file
(.<folder>.lock) that every process serving from the folder holds shared.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import shutil
import threading
import time
from pathlib import Path

from core.storage.secrets import StorageError

log = logging.getLogger("ov_serverless.storage")

# A download this big (a version's files together) reports progress while it runs.
PROGRESS_MIN_BYTES = 50 << 20
PROGRESS_INTERVAL_S = 2.0
# A write that fails for want of room: reported as such at once, never retried.
DISK_FULL = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})


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
        raise StorageError(
            f"Refusing the cache folder {'/'.join(parts)!r}: it resolves outside the cache dir"
        )
    return path


def disk_full(exc: BaseException | None) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_FULL


def no_space(url: str, needed: int) -> StorageError:
    return StorageError(
        f"Cannot download {url}: no space left in the cache dir ({needed / 1e6:.1f} MB needed)"
    )


def publish(tmp: Path, target: Path) -> None:
    """Atomically rename `tmp` to `target`; if another fetch got there first, keep theirs."""
    try:
        os.rename(tmp, target)
    except OSError:
        if not target.is_dir():
            raise


class Folders:
    """The downloaded version folders in use, counted per process (two models may name the same
    bucket path) and across processes by a shared flock on a lock file beside each folder (two
    gunicorn workers, or pods, on one cache volume). The last user deletes the folder: a
    long-lived instance that sees many versions come and go would otherwise fill its disk (/tmp
    is small on Lambda). One lock per file a load downloads later keeps two loads of the same
    folder from downloading it twice at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: dict[Path, int] = {}
        self._locks: dict[Path, int] = {}  # folder -> fd holding LOCK_SH on its lock file
        self._downloads: dict[Path, threading.Lock] = {}  # file -> one download at once

    def acquire(self, folder: Path) -> None:
        with self._lock:
            if folder not in self._users:
                self._locks[folder] = _shared_lock(_lock_file(folder))
            self._users[folder] = self._users.get(folder, 0) + 1

    def holds(self, folder: Path) -> bool:
        with self._lock:
            return folder in self._users

    def download_lock(self, dest: Path) -> threading.Lock:
        """The lock a download into `dest` (a file in a held folder) takes."""
        with self._lock:
            return self._downloads.setdefault(dest, threading.Lock())

    def release(self, folder: Path) -> None:
        with self._lock:
            count = self._users.pop(folder, 0)
            if count > 1:
                self._users[folder] = count - 1
                return
            fd = self._locks.pop(folder, None)
            if fd is None:  # never acquired (a version whose fetch failed)
                return
            for dest in [d for d in self._downloads if d.is_relative_to(folder)]:
                del self._downloads[dest]
            try:
                gone = _take(folder, fd)
            finally:
                os.close(fd)
        if gone is not None:
            shutil.rmtree(gone, ignore_errors=True)
            log.info("removed cached version folder", extra={"path": str(folder)})


FOLDERS = Folders()


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


def _bytes_under(folder: Path) -> int:
    total = 0
    for root, _, names in os.walk(folder):
        for name in names:
            with contextlib.suppress(OSError):  # renamed or removed since the listing
                total += os.stat(os.path.join(root, name)).st_size
    return total
