"""What a provider's client gives a bucket repository (core.storage.bucket), and the rules every
client shares: the objects it lists, the timeouts and retries, and the checks that keep a
bucket URL or an object key from naming another place than the one written.

A client (s3/, gcs/, azure/: sdk.py or rest.py) only lists objects, downloads one object to a
path and reads one object's bytes, raising StorageError (naming the URL and the cause) for any
failure.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from core import errors
from core.storage.secrets import StorageError, redact

# Short enough that a dead endpoint fails in seconds, not minutes; reads may be slow (big .bin).
CONNECT_TIMEOUT_S = 3.0
READ_TIMEOUT_S = 30.0
RETRIES = 2  # retries after the first attempt, with sub-second to ~2 s backoff
MAX_WORKERS = 8  # files of one version downloaded at once


@dataclass(frozen=True)
class RemoteObject:
    key: str  # full object key / blob name
    size: int
    tag: str  # ETag, generation, content MD5: whatever changes when the content does
    # digests the listing gave, in the backend's own words (core.storage.checksums): the
    # integrity check of a download whose answer names none
    hashes: str = field(default="", compare=False)


class Backend(Protocol):
    """One bucket (container) of one provider, through its SDK or its REST API."""

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
    return check_path(check_authority(bucket, url), url), check_path(prefix.strip("/"), url)


def check_authority(authority: str, url: str) -> str:
    """`authority` (what follows '://' up to the first '/': a bucket, or S3's host:port) unless
    it holds user info ('user:password@'), which no bucket or host name does: credentials come
    from the environment, and a password here would be echoed in errors (ConfigError, redacted)."""
    if "@" in authority:
        raise errors.ConfigError(
            redact(
                f"Invalid bucket URL {url!r}: credentials in the URL (user:password@) are not "
                "taken; give them in the environment or the provider's credential files"
            )
        )
    return authority


def check_path(path: str, url: str) -> str:
    """`path` (a bucket name, a prefix, a key) when every '/'-segment is a plain name: '.',
    '..', an empty segment, a backslash or a NUL would name another place in a bucket than the
    one written, or leave the cache dir once joined into a local path (ConfigError)."""
    for segment in path.split("/") if path else ():
        problem = (
            "an empty path segment"
            if not segment
            else "a NUL character"
            if "\0" in segment
            else "a backslash"
            if "\\" in segment
            else f"the path segment {segment!r}"
            if segment in (".", "..")
            else ""
        )
        if problem:
            raise errors.ConfigError(
                redact(
                    f"Invalid bucket URL {url!r}: {problem}; a bucket URL takes no '.', '..' or "
                    "empty path segments, backslashes or NUL characters"
                )
            )
    return path


def object_key(key: str, url: str) -> str:
    """The key of a single-file URL (a config.json in a bucket); a bare bucket is an error."""
    if not key:
        raise StorageError(f"Missing object key in {url}")
    return check_path(key, url)


def relative_key(key: str, base: str) -> str:
    """`key` below `base` (both without a leading slash); refuses keys that are not below it,
    or whose path would leave it or cannot be a file name ('.', '..', empty, NUL)."""
    rel = key.removeprefix(base.rstrip("/") + "/") if base else key
    parts = rel.split("/")
    if (base and rel == key) or any(p in ("", ".", "..") or "\0" in p for p in parts):
        shown = key.replace("\0", "\\0")
        raise StorageError(
            f"Refusing object key that leaves its version folder or cannot be a "
            f"file name: {shown!r}"
        )
    return rel


def below(key: str, base: str) -> str:
    """`key` less `base` and the '/' after it, unchecked (see relative_key)."""
    return key[len(base) :].removeprefix("/") if base else key
