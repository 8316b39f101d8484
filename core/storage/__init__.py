"""Model repositories behind one small interface, picked by URL scheme.

A repository lists the numeric version folders under a base path with a fingerprint of each
(ETag / generation / size+mtime, so a reload can skip unchanged versions) and fetches one
version: a `VersionFiles` value, the local folder a runtime reads plus, for a bucket, what the
fetch left in the bucket and how to download it when a load needs it. The value is all the
runtime gets from storage: nothing is looked up by folder path in a process global.

Modules: local.py (a folder on disk), bucket.py (any bucket: versions, fingerprints, fetch),
folders.py (the download cache shared by the process), backend.py (what a provider's client
implements), http_client.py (the stdlib HTTP client of the REST clients), download.py (an
object into a file over it, checked against its digests), and one package per
cloud, s3/, gcs/, azure/: URL parsing, client choice (`OVS_<P>_CLIENT=auto|sdk|rest`, see
clients.py) and error texts in its __init__, the official SDK's client in sdk.py, the fast
stdlib client in rest.py. A cloud package is imported only when a URL of its scheme is opened,
and its SDK only when its SDK client is chosen.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Protocol

BLOB_FOLDER = ".ov-compiled"  # <version>/.ov-compiled/<key>.blob (core.runtime.blobs)
# Files a model's graph is read from (the rest are weights): a compiled blob's key hashes them
# whole, and a bucket never leaves them behind (core.storage.bucket).
GRAPH_SUFFIXES = (".xml", ".onnx", ".pdmodel", ".pb", ".tflite", ".json")

# A version folder's name: ASCII digits, no leading zero, within gRPC's int64 version field.
# Any other name beside the version folders (notes, `²`, `01`) is not a version: ignored, as
# OVMS ignores what is not a number.
_VERSION = re.compile(r"[1-9][0-9]{0,17}")

PROVIDERS = {
    "s3": "core.storage.s3",
    "gs": "core.storage.gcs",
    "az": "core.storage.azure",
    "azure": "core.storage.azure",
    "azfs": "core.storage.azure",
}


class VersionFiles:
    """One fetched version's files. `folder` is the local folder the runtime reads; every file
    is in it. A bucket's version (core.storage.bucket) may leave some in the bucket, fetched by
    the three methods when a load needs them."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.folder)!r})"

    def listed_weights(self) -> dict[str, tuple[int, str]]:
        """Weight files (not graph files) as the bucket listed them: relative path -> (size,
        tag); a compiled blob's key names them so, read or not. Empty on local disk."""
        return {}

    def blob(self, name: str) -> Path | None:
        """<folder>/.ov-compiled/<name> downloaded from the bucket, when the bucket lists it;
        None otherwise (a local folder's blobs are simply in it)."""
        return None

    def complete(self) -> None:
        """Download the files still in the bucket (a load is about to read the weights)."""


class Repository(Protocol):
    """One model's base path: `<base>/<version>/<files>`."""

    url: str

    def versions(self) -> dict[int, str]:
        """Numeric version folders -> fingerprint of their files (changes when a file does)."""
        ...

    def fetch(self, version: int) -> VersionFiles:
        """That version's files, in a local folder (downloaded if remote)."""
        ...

    def release(self, files: VersionFiles) -> None:
        """The version those files were fetched for is done with them (ended, or never
        loaded): a downloaded copy nothing else in the process uses is deleted."""
        ...


def version_number(name: str) -> int | None:
    """The version a folder name stands for, or None when it is no version folder."""
    return int(name) if _VERSION.fullmatch(name) else None


def scheme_of(url: str) -> str:
    head, sep, _ = url.partition("://")
    return head.lower() if sep else ""


def open_repository(url: str, cache_dir: Path) -> Repository:
    """The repository at `url`; a bucket's versions are downloaded under `cache_dir`."""
    scheme = scheme_of(url)
    if not scheme:
        from core.storage.local import LocalRepository

        return LocalRepository(url)
    repository: Repository = _provider(scheme, url, "model repository").open_repository(
        url, cache_dir
    )
    return repository


def read_file(url: str) -> bytes:
    """The bytes of one file (a config.json), local or in a bucket."""
    scheme = scheme_of(url)
    if not scheme:
        return Path(url).read_bytes()
    data: bytes = _provider(scheme, url, "config file").read_file(url)
    return data


def renew_client(repository: Repository) -> None:
    """Give a bucket repository a new client, built from the environment as it is now: pooled
    connections (dead or shared after a snapshot restore), SDK clients and the credentials
    read when they were built are dropped. Versions fetched before keep working through it.
    A repository on local disk has no client. Raises StorageError (credentials gone...)."""
    from core.storage.bucket import BucketRepository

    if isinstance(repository, BucketRepository):
        repository.renew()


def forget_tokens() -> None:
    """Drop the access tokens the REST clients obtained (the metadata server's), with their
    expiry clocks: the next request asks for a new one."""
    gcs_rest = sys.modules.get("core.storage.gcs.rest")
    if gcs_rest is not None:
        gcs_rest.forget_tokens()


def _provider(scheme: str, url: str, what: str) -> ModuleType:
    module = PROVIDERS.get(scheme)
    if module is None:
        from core.storage.secrets import StorageError

        raise StorageError(f"Unsupported {what} scheme '{scheme}://' in {url}")
    return importlib.import_module(module)
