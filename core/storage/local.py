"""Model repository on local disk (or any mounted file system)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from core.errors import StorageError


class LocalRepository:
    def __init__(self, url: str) -> None:
        self.url = url
        self.base = Path(url)

    def versions(self) -> dict[int, str]:
        if not self.base.is_dir():
            raise StorageError(
                f"The provided base path is invalid or doesn't exists: {self.url}"
            )
        found: dict[int, str] = {}
        try:
            entries = list(self.base.iterdir())
        except OSError as exc:
            raise StorageError(f"Cannot list the model base path {self.url}: {exc}") from exc
        for entry in entries:
            if entry.is_dir() and entry.name.isdigit() and int(entry.name) > 0:
                fingerprint = _fingerprint(entry)
                if fingerprint is not None:
                    found[int(entry.name)] = fingerprint
        return found

    def fetch(self, version: int) -> Path:
        folder = self.base / str(version)
        if not folder.is_dir():
            raise StorageError(f"Version folder is missing: {folder}")
        return folder

    def release(self, folder: Path) -> None:
        """The user's own files: never deleted."""


def _fingerprint(folder: Path) -> str | None:
    """Names, sizes and mtimes of every file; None when the folder vanished while being read
    (deleted under us: the next poll sees what is left)."""
    digest = hashlib.sha1()
    try:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            stat = path.stat()
            digest.update(f"{path.relative_to(folder)}:{stat.st_size}:{stat.st_mtime_ns};"
                          .encode())
    except FileNotFoundError:
        digest.update(b"changing")  # a file went away mid-listing: differs from either side
    return digest.hexdigest() if folder.is_dir() else None
