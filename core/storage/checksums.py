"""End-to-end integrity for the REST clients, as the SDKs check it: the digest a provider
gives for an object (S3's x-amz-checksum-* or a single-part ETag, Cloud Storage's crc32c/md5,
Azure's Content-MD5), computed again over the bytes written. A mismatch is a StorageError and
the download's temp file never becomes visible (core.storage.download).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import zlib
from dataclasses import dataclass
from typing import Protocol


class Updater(Protocol):
    def update(self, data: bytes | memoryview, /) -> None: ...


class Hasher(Protocol):
    def update(self, data: bytes | memoryview, /) -> None: ...

    def digest(self) -> bytes: ...


class _Crc32:
    def __init__(self) -> None:
        self._value = 0

    def update(self, data: bytes | memoryview, /) -> None:
        self._value = zlib.crc32(data, self._value)

    def digest(self) -> bytes:
        return self._value.to_bytes(4, "big")


def _crc32c() -> Hasher | None:
    """google-crc32c's (C, ~3 GB/s) where installed (it comes with google-cloud-storage);
    a pure Python CRC32C would cost more than the download."""
    try:
        import google_crc32c
    except ImportError:
        return None
    if google_crc32c.implementation != "c":
        return None
    checksum: Hasher = google_crc32c.Checksum()
    return checksum


_HASHLIB = {"md5", "sha1", "sha256"}
# a few GB/s: hashing a file costs a small part of downloading it (MD5 runs ~350 MB/s)
FAST = frozenset({"crc32", "crc32c"})


def new_hasher(algorithm: str) -> Hasher | None:
    """A hasher for `algorithm`, or None when none fast enough is at hand."""
    if algorithm in _HASHLIB:
        return hashlib.new(algorithm)
    if algorithm == "crc32":
        return _Crc32()
    if algorithm == "crc32c":
        return _crc32c()
    return None  # crc64nvme, crc64 (Azure's): no fast implementation in the standard library


@dataclass(frozen=True)
class Digest:
    """What an object's bytes must hash to: `want` (raw) under `algorithm`, as `source` (the
    header or listing field) gave it."""

    algorithm: str
    want: bytes
    source: str

    def hasher(self) -> Hasher | None:
        return new_hasher(self.algorithm)

    def mismatch(self, got: bytes) -> str:
        """'' when `got` is the wanted digest, else the words of the error."""
        if got == self.want:
            return ""
        return (
            f"the downloaded bytes do not match the object's {self.algorithm.upper()} "
            f"({self.source}): got {_b64(got)}, expected {_b64(self.want)}"
        )


def from_base64(algorithm: str, value: str, source: str) -> Digest | None:
    """A digest given in base64 (x-amz-checksum-*, x-goog-hash, Content-MD5); None when the
    value is no plain digest (a multipart upload's composite `<b64>-<parts>`, or garbage) or
    there is no fast hasher for the algorithm."""
    try:
        raw = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    if not raw or new_hasher(algorithm) is None:
        return None
    return Digest(algorithm, raw, source)


def from_hex_md5(value: str, source: str) -> Digest | None:
    """An MD5 written as 32 hex digits, quoted or not (S3's ETag of a single-part upload)."""
    text = value.strip().strip('"')
    if len(text) != 32:
        return None
    try:
        return Digest("md5", bytes.fromhex(text), source)
    except ValueError:
        return None


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


class Check:
    """`digest` being computed again over a download, one chunk after another."""

    def __init__(self, digest: Digest, hasher: Hasher) -> None:
        self.digest, self._hasher = digest, hasher

    def update(self, data: bytes | memoryview) -> None:
        self._hasher.update(data)

    def problem(self) -> str:
        """'' when the bytes seen hash to the digest, else the words of the error."""
        return self.digest.mismatch(self._hasher.digest())


def start(digest: Digest | None, only: frozenset[str] | None = None) -> Check | None:
    """A fresh Check of `digest`; None when there is none, no hasher for it, or its algorithm
    is not among `only` (a big file is checked only where that costs little beside its
    download)."""
    if digest is None or (only is not None and digest.algorithm not in only):
        return None
    hasher = digest.hasher()
    return Check(digest, hasher) if hasher is not None else None
