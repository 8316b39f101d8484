"""Model repositories behind one small interface, picked by URL scheme.

A backend lists the numeric version folders under a base path with a fingerprint of each
(ETag / generation / size+mtime, so a reload can skip unchanged versions) and makes one
version's files available as a local folder. Cloud SDKs are imported only inside their own
module, and only when a URL of that scheme is opened.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Protocol

BLOB_FOLDER = ".ov-compiled"  # <version>/.ov-compiled/<key>.blob (core.compiled_cache)
# Files a model's graph is read from (the rest are weights): a compiled blob's key hashes them
# whole, and a bucket never defers them (core.storage.remote).
GRAPH_SUFFIXES = (".xml", ".onnx", ".pdmodel", ".pb", ".tflite", ".json")

# A version folder's name: ASCII digits, no leading zero, within gRPC's int64 version field.
# Any other name beside the version folders (notes, `²`, `01`) is not a version: ignored, as
# OVMS ignores what is not a number.
_VERSION = re.compile(r"[1-9][0-9]{0,17}")

REMOTE_SCHEMES = {
    "s3": "core.storage.s3",
    "gs": "core.storage.gcs",
    "az": "core.storage.azure",
    "azure": "core.storage.azure",
    "azfs": "core.storage.azure",
}


class Repository(Protocol):
    """One model's base path: `<base>/<version>/<files>`."""

    url: str

    def versions(self) -> dict[int, str]:
        """Numeric version folders -> fingerprint of their files (changes when a file does)."""
        ...

    def fetch(self, version: int) -> Path:
        """A local folder holding exactly that version's files (downloaded if remote)."""
        ...

    def release(self, folder: Path) -> None:
        """A version fetched into `folder` is done with it (ended, or never loaded): a
        downloaded copy nothing else in the process uses is deleted."""
        ...


def version_number(name: str) -> int | None:
    """The version a folder name stands for, or None when it is no version folder."""
    return int(name) if _VERSION.fullmatch(name) else None


def scheme_of(url: str) -> str:
    head, sep, _ = url.partition("://")
    return head.lower() if sep else ""


def open_repository(url: str, cache_dir: Path) -> Repository:
    """The backend for `url`; remote versions are downloaded under `cache_dir`."""
    scheme = scheme_of(url)
    if not scheme:
        from core.storage.local import LocalRepository

        return LocalRepository(url)
    module = REMOTE_SCHEMES.get(scheme)
    if module is None:
        from core.storage.secrets import StorageError

        raise StorageError(f"Unsupported model repository scheme '{scheme}://' in {url}")
    backend: Repository = importlib.import_module(module).open_repository(url, cache_dir)
    return backend


def read_file(url: str) -> bytes:
    """The bytes of one file (a config.json), local or in a bucket."""
    scheme = scheme_of(url)
    if not scheme:
        return Path(url).read_bytes()
    module = REMOTE_SCHEMES.get(scheme)
    if module is None:
        from core.storage.secrets import StorageError

        raise StorageError(f"Unsupported config file scheme '{scheme}://' in {url}")
    data: bytes = importlib.import_module(module).read_file(url)
    return data
