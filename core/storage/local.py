"""Model repository on local disk (or any mounted file system).

The base path is taken as configured (anywhere the process may read, as in OVMS). Inside it,
version folders are named by ASCII digits only (core.storage.version_number) and a version
folder, or a file or folder in it, that is a symlink leading out of the base path is refused:
that version fails with the cause, and the model's other versions still serve. Links that
stay inside (a Kubernetes ConfigMap's `..data`) are followed.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from core.storage import VersionFiles, version_number
from core.storage.secrets import StorageError


class LocalRepository:
    def __init__(self, url: str) -> None:
        self.url = url
        self.base = Path(url)

    def versions(self) -> dict[int, str]:
        if not self.base.is_dir():
            raise StorageError(f"The provided base path is invalid or doesn't exists: {self.url}")
        found: dict[int, str] = {}
        try:
            entries = list(self.base.iterdir())
        except OSError as exc:
            raise StorageError(f"Cannot list the model base path {self.url}: {exc}") from exc
        for entry in entries:
            number = version_number(entry.name)
            if number is not None and entry.is_dir():
                fingerprint = folder_fingerprint(entry)
                if fingerprint is not None:
                    found[number] = fingerprint
        return found

    def fetch(self, version: int) -> VersionFiles:
        folder = self.base / str(version)
        if not folder.is_dir():
            raise StorageError(f"Version folder is missing: {folder}")
        _refuse_links_out(folder, self.base)
        return VersionFiles(folder)

    def release(self, files: VersionFiles) -> None:
        """The user's own files: never deleted."""


def _refuse_links_out(folder: Path, base: Path) -> None:
    """StorageError naming (below `base`) the first path under `folder`, itself included,
    whose target, links resolved, is not under `base`; a linked folder is searched once (no
    cycles). Where it leads is not said: the message reaches clients."""
    root = os.path.realpath(base)
    seen: set[str] = set()
    pending = [str(folder)]
    while pending:
        path = pending.pop()
        target = os.path.realpath(path)
        if os.path.commonpath([root, target]) != root:
            raise StorageError(
                f"Refusing {os.path.relpath(path, base)!r} of model base path "
                f"{base}: a symlink that leads outside the model's base path"
            )
        if target in seen or not os.path.isdir(target):
            continue
        seen.add(target)
        try:
            pending += [os.path.join(path, name) for name in os.listdir(path)]
        except OSError as exc:
            raise StorageError(f"Cannot list {path}: {exc}") from exc


def folder_fingerprint(folder: Path) -> str | None:
    """Names, sizes and mtimes of every file; None when the folder vanished while being read
    (deleted under us: the next poll sees what is left)."""
    digest = hashlib.sha1()
    try:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            stat = path.stat()
            digest.update(
                f"{path.relative_to(folder)}:{stat.st_size}:{stat.st_mtime_ns};".encode(
                    "utf-8", "surrogateescape"
                )
            )
    except FileNotFoundError:
        digest.update(b"changing")  # a file went away mid-listing: differs from either side
    return digest.hexdigest() if folder.is_dir() else None
