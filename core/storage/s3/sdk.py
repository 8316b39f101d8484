"""S3 through boto3 (imported here only, when this client is chosen): the client boto3's
default chain configures, with this project's timeouts and retries, and boto3's failures in
the words of core.storage.s3.describe."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from core.storage.backend import (
    CONNECT_TIMEOUT_S,
    MAX_WORKERS,
    READ_TIMEOUT_S,
    RETRIES,
    RemoteObject,
)
from core.storage.folders import disk_full
from core.storage.s3 import describe, resolve_endpoint
from core.storage.secrets import StorageError


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


_ENV_CREDENTIALS = {
    "aws_access_key_id": "AWS_ACCESS_KEY_ID",
    "aws_secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "aws_session_token": "AWS_SESSION_TOKEN",
}


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
    """boto3's failures as StorageError (the cause in the words of describe); a full disk goes
    on as the OSError it is (the bucket repository words it)."""
    from boto3.exceptions import RetriesExceededError as Boto3RetriesExceeded
    from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
    from botocore.exceptions import ConnectionError as EndpointError
    from s3transfer.exceptions import RetriesExceededError

    try:
        yield
    except ClientError as exc:
        err = exc.response.get("Error", {})
        cause = describe(str(err.get("Code", "?")), err.get("Message") or "", bucket)
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
        raise StorageError(
            f"{what}: the S3 endpoint answers with a redirect loop "
            "(301 and no region, again and again)"
        ) from exc


class S3Backend:
    """One bucket through boto3; the client is built on first use."""

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
