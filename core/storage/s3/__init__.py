"""Amazon S3 (and MinIO, moto, any S3 API): URLs, endpoints, the choice of client and the
words of its errors. The REST client (rest.py) reads where the environment holds credentials
and region (Lambda), else boto3 (sdk.py, imported only then); `OVS_S3_CLIENT=auto|sdk|rest`
(core.storage.clients; `boto3` is sdk) overrides the choice.

URLs: `s3://bucket/prefix` or, as OVMS accepts, `s3://host:port/bucket/prefix`.
Credentials: AWS_* env (REST client), else boto3's default chain (AWS_PROFILE,
container/instance role); with none found, requests go unsigned (public buckets), as OVMS does.
Endpoint, first match wins: host:port in the URL, OVMS's `S3_ENDPOINT` (http:// assumed when
it has no scheme), then boto3's own `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`. Any endpoint
override switches to path-style addressing (MinIO and emulators need it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from core.storage import clients
from core.storage.backend import Backend, check_authority, check_path, object_key
from core.storage.bucket import BucketRepository
from core.storage.secrets import StorageError

if TYPE_CHECKING:
    from core.storage.s3.signing import Credentials

SCHEMES = ("s3",)
VARIABLE = "OVS_S3_CLIENT"
DENIED = {
    "AccessDenied",
    "403",
    "Forbidden",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "AllAccessDisabled",
}
MISSING = {"NoSuchKey", "404", "NotFound"}


def parse_url(url: str) -> tuple[str | None, str, str]:
    """-> (endpoint from the URL or None, bucket, prefix)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in SCHEMES:
        raise StorageError(f"Not an s3:// URL: {url}")
    first, _, rest = rest.partition("/")
    check_authority(first, url)
    host = None
    if ":" in first:  # bucket names never hold ':', so this is OVMS's s3://host:port/...
        host = first
        first, _, rest = rest.partition("/")
    if not first:
        raise StorageError(f"Missing bucket name in {url}")
    endpoint = None
    if host:
        endpoint = f"{'https' if host.endswith(':443') else 'http'}://{host}"
    return endpoint, check_path(first, url), check_path(rest.strip("/"), url)


def resolve_endpoint(from_url: str | None) -> tuple[str | None, bool]:
    """-> (endpoint_url to pass to boto3 or None to let it decide, use path-style)."""
    if from_url:
        return from_url, True
    ovms = os.environ.get("S3_ENDPOINT", "").strip()
    if ovms:
        return (ovms if "://" in ovms else f"http://{ovms}"), True
    return None, bool(native_endpoint())


def native_endpoint() -> str | None:
    """boto3's own endpoint variables (its client reads them by itself)."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def describe(code: str, message: str, bucket: str) -> str:
    """The cause of an S3 error in words, as both clients report it."""
    if code == "NoSuchBucket":
        return f"bucket '{bucket}' does not exist"
    if code in DENIED:
        return f"access denied ({code}): {message or code}"
    if code in MISSING:
        return "object not found"
    if code in ("PreconditionFailed", "412"):  # If-Match the listed ETag
        return "the object changed or was deleted since it was listed (PreconditionFailed)"
    return f"{code}: {message or code}"


def choose(endpoint_url: str | None) -> tuple[Credentials, str] | None:
    """(credentials, region) for the REST client, or None for boto3 (OVS_S3_CLIENT)."""

    def rest_setup() -> tuple[Credentials, str] | str:
        from core.storage.s3 import rest

        return rest.from_environment(endpoint_url)

    return clients.choose(VARIABLE, rest_setup, clients.ALIASES)


def backend(bucket: str, endpoint: str | None) -> Backend:
    """The client choose() picks for the bucket."""
    endpoint_url = resolve_endpoint(endpoint)[0] or native_endpoint()
    chosen = choose(endpoint_url)
    if chosen is None:
        from core.storage.s3.sdk import S3Backend

        return S3Backend(bucket, endpoint)
    from core.storage.s3.rest import S3RestBackend

    return S3RestBackend(bucket, endpoint_url, *chosen)


def open_repository(url: str, cache_dir: Path) -> BucketRepository:
    endpoint, bucket, prefix = parse_url(url)
    return BucketRepository.connected(url, lambda: backend(bucket, endpoint), prefix, cache_dir)


def read_file(url: str) -> bytes:
    endpoint, bucket, key = parse_url(url)
    return backend(bucket, endpoint).read(object_key(key, url))
