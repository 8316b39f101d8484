"""Amazon S3 (and MinIO, moto, any S3 API): core.storage.s3_rest where the environment holds
credentials and region (Lambda), else boto3, imported only here, lazily.

URLs: `s3://bucket/prefix` or, as OVMS accepts, `s3://host:port/bucket/prefix`.
Credentials: AWS_* env (REST client), else boto3's default chain (AWS_PROFILE,
container/instance role); with none found, requests go unsigned (public buckets), as OVMS does.
Endpoint, first match wins: host:port in the URL, OVMS's `S3_ENDPOINT` (http:// assumed when
it has no scheme), then boto3's own `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`. Any endpoint
override switches to path-style addressing (MinIO and emulators need it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from core.storage import s3_rest
from core.storage.remote import (
    CONNECT_TIMEOUT_S,
    MAX_WORKERS,
    READ_TIMEOUT_S,
    RETRIES,
    Backend,
    RemoteObject,
    RemoteRepository,
    check_path,
    disk_full,
    object_key,
)
from core.storage.secrets import StorageError

SCHEMES = ("s3",)


def parse_url(url: str) -> tuple[str | None, str, str]:
    """-> (endpoint from the URL or None, bucket, prefix)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in SCHEMES:
        raise StorageError(f"Not an s3:// URL: {url}")
    first, _, rest = rest.partition("/")
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


def make_client(endpoint: str | None) -> Any:
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config

    endpoint_url, path_style = resolve_endpoint(endpoint)
    options: dict[str, Any] = {
        "connect_timeout": CONNECT_TIMEOUT_S,
        "read_timeout": READ_TIMEOUT_S,
        "retries": {"total_max_attempts": 1 + RETRIES, "mode": "standard"},
        "max_pool_connections": 2 * MAX_WORKERS,
    }
    if path_style:
        options["s3"] = {"addressing_style": "path"}
    with _errors(f"Cannot set up an S3 client for {endpoint_url or 'AWS'}"):
        session = boto3.session.Session(**_trimmed_env_credentials())
        if session.get_credentials() is None:
            options["signature_version"] = UNSIGNED
        return session.client("s3", endpoint_url=endpoint_url, config=Config(**options))


_ENV_CREDENTIALS = {"aws_access_key_id": "AWS_ACCESS_KEY_ID",
                    "aws_secret_access_key": "AWS_SECRET_ACCESS_KEY",
                    "aws_session_token": "AWS_SESSION_TOKEN"}


def _trimmed_env_credentials() -> dict[str, str]:
    """The environment's credentials without the newline a value read from a mounted secret
    file may end in (botocore would send it, and fail), when one has it; else none (boto3's
    own chain reads them)."""
    values = {arg: os.environ.get(name, "") for arg, name in _ENV_CREDENTIALS.items()}
    if all(value == value.strip() for value in values.values()):
        return {}
    return {arg: value.strip() for arg, value in values.items() if value.strip()}


@contextmanager
def _errors(what: str, bucket: str = "") -> Iterator[None]:
    """boto3's failures as StorageError (the cause in the words of s3_rest.describe); a full
    disk goes on as the OSError it is (RemoteRepository words it)."""
    from boto3.exceptions import RetriesExceededError as Boto3RetriesExceeded
    from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
    from botocore.exceptions import ConnectionError as EndpointError
    from s3transfer.exceptions import RetriesExceededError

    try:
        yield
    except ClientError as exc:
        err = exc.response.get("Error", {})
        cause = s3_rest.describe(str(err.get("Code", "?")), err.get("Message") or "", bucket)
        raise StorageError(f"{what}: {cause}") from exc
    except (EndpointError, HTTPClientError) as exc:
        raise StorageError(f"{what}: cannot reach the S3 endpoint: {exc}") from exc
    except (RetriesExceededError, Boto3RetriesExceeded) as exc:  # download_file raises boto3's
        if disk_full(exc.last_exception):
            raise exc.last_exception from exc
        raise StorageError(f"{what}: cannot reach the S3 endpoint: {exc.last_exception}") from exc
    except BotoCoreError as exc:
        raise StorageError(f"{what}: {exc}") from exc
    except RecursionError as exc:  # botocore's region redirector asks HeadBucket, which
        # redirects again: an endpoint that answers every request with a 301 and no region
        raise StorageError(f"{what}: the S3 endpoint answers with a redirect loop "
                           "(301 and no region, again and again)") from exc


class S3Backend:
    scheme = "s3"

    def __init__(self, bucket: str, endpoint: str | None) -> None:
        self.bucket = bucket
        self.endpoint = endpoint
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = make_client(self.endpoint)
        return self._client

    def _url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def list_objects(self, prefix: str) -> Iterator[RemoteObject]:
        with _errors(f"Cannot list {self._url(prefix)}", self.bucket):
            pages = self.client.get_paginator("list_objects_v2")
            for page in pages.paginate(Bucket=self.bucket, Prefix=prefix):
                for item in page.get("Contents", ()):
                    yield RemoteObject(item["Key"], int(item["Size"]), str(item.get("ETag")))

    def download(self, obj: RemoteObject, dest: Path) -> None:
        from boto3.s3.transfer import TransferConfig

        config = TransferConfig(multipart_threshold=16 << 20, max_concurrency=4)
        with _errors(f"Cannot download {self._url(obj.key)}", self.bucket):
            self.client.download_file(self.bucket, obj.key, str(dest), Config=config)

    def read(self, key: str) -> bytes:
        with _errors(f"Cannot read {self._url(key)}", self.bucket):
            body: bytes = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            return body


def open_repository(url: str, cache_dir: Path) -> RemoteRepository:
    endpoint, bucket, prefix = parse_url(url)
    return RemoteRepository(url, backend(bucket, endpoint), prefix, cache_dir)


def read_file(url: str) -> bytes:
    endpoint, bucket, key = parse_url(url)
    return backend(bucket, endpoint).read(object_key(key, url))


def backend(bucket: str, endpoint: str | None) -> Backend:
    """The REST client when s3_rest.choose() accepts the environment, else boto3's."""
    endpoint_url = resolve_endpoint(endpoint)[0] or native_endpoint()
    chosen = s3_rest.choose(endpoint_url)
    if chosen is None:
        return S3Backend(bucket, endpoint)
    return s3_rest.S3RestBackend(bucket, endpoint_url, *chosen)
