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
        for entry in self.base.iterdir():
            if entry.is_dir() and entry.name.isdigit() and int(entry.name) > 0:
                found[int(entry.name)] = _fingerprint(entry)
        return found

    def fetch(self, version: int) -> Path:
        folder = self.base / str(version)
        if not folder.is_dir():
            raise StorageError(f"Version folder is missing: {folder}")
        return folder


def _fingerprint(folder: Path) -> str:
    digest = hashlib.sha1()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        stat = path.stat()
        digest.update(f"{path.relative_to(folder)}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()
