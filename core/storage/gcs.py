"""Google Cloud Storage: core.storage.gcs_rest on Cloud Run (the metadata server's token) and
for the emulator, else google-cloud-storage, imported only here, lazily.

URL: `gs://bucket/prefix`. Credentials: Application Default Credentials
(GOOGLE_APPLICATION_CREDENTIALS, gcloud, the metadata server on Cloud Run / GKE); with none
found, anonymous access (public buckets). With `STORAGE_EMULATOR_HOST` set (the SDK's own
emulator switch, e.g. http://127.0.0.1:9023), anonymous credentials and the project from
GOOGLE_CLOUD_PROJECT (or a placeholder).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from core.storage import gcs_rest
from core.storage.remote import (
    CONNECT_TIMEOUT_S,
    READ_TIMEOUT_S,
    RETRIES,
    Backend,
    RemoteObject,
    RemoteRepository,
    object_key,
    split_url,
)
from core.storage.secrets import StorageError

SCHEMES = ("gs",)
TIMEOUT = (CONNECT_TIMEOUT_S, READ_TIMEOUT_S)
RETRY_WINDOW_S = 1.5 * RETRIES  # backoff 0.25, 0.5, 1 s ... stops retrying after this

log = logging.getLogger("ov_serverless.storage")


def make_client() -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.auth.exceptions import DefaultCredentialsError
    from google.cloud import storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        project = os.environ.get("GOOGLE_CLOUD_PROJECT") or "ov-serverless"
        return storage.Client(project=project, credentials=AnonymousCredentials())
    try:
        return storage.Client()
    except DefaultCredentialsError:
        log.info("no Google credentials found; using anonymous access to Cloud Storage")
        return storage.Client.create_anonymous_client()


def _retry() -> Any:
    from google.cloud.storage.retry import DEFAULT_RETRY

    return DEFAULT_RETRY.with_delay(initial=0.25, multiplier=2.0, maximum=2.0).with_timeout(
        RETRY_WINDOW_S
    )


@contextmanager
def _errors(what: str, bucket: str, listing: bool = False) -> Iterator[None]:
    import requests
    from google.api_core import exceptions as api
    from google.auth import exceptions as auth

    try:
        yield
    except api.RetryError as exc:
        raise StorageError(f"{what}: cannot reach Cloud Storage: {exc.cause or exc}") from exc
    except api.NotFound as exc:
        # a listing only 404s for the bucket; a download 404s for the object
        cause = f"bucket '{bucket}' does not exist" if listing else "object not found"
        raise StorageError(f"{what}: {cause}") from exc
    except (api.Forbidden, api.Unauthorized) as exc:
        raise StorageError(f"{what}: access denied: {exc.message}") from exc
    except api.GoogleAPICallError as exc:
        raise StorageError(f"{what}: {exc.code} {exc.message}") from exc
    except (requests.ConnectionError, requests.Timeout, auth.TransportError) as exc:
        raise StorageError(f"{what}: cannot reach Cloud Storage: {exc}") from exc
    except auth.GoogleAuthError as exc:
        raise StorageError(f"{what}: credentials: {exc}") from exc


class GcsBackend:
    scheme = "gs"

    def __init__(self, bucket: str) -> None:
        self.bucket = bucket
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            with _errors("Cannot set up a Cloud Storage client", self.bucket):
                self._client = make_client()
        return self._client

    def _url(self, key: str) -> str:
        return f"gs://{self.bucket}/{key}"

    def list_objects(self, prefix: str) -> Iterator[RemoteObject]:
        with _errors(f"Cannot list {self._url(prefix)}", self.bucket, listing=True):
            blobs = self.client.list_blobs(
                self.bucket, prefix=prefix or None, timeout=TIMEOUT, retry=_retry()
            )
            for blob in blobs:
                tag = f"{blob.generation}:{blob.md5_hash or blob.etag}"
                yield RemoteObject(blob.name, int(blob.size or 0), tag)

    def download(self, obj: RemoteObject, dest: Path) -> None:
        with _errors(f"Cannot download {self._url(obj.key)}", self.bucket):
            blob = self.client.bucket(self.bucket).blob(obj.key)
            blob.download_to_filename(str(dest), timeout=TIMEOUT, retry=_retry())

    def read(self, key: str) -> bytes:
        with _errors(f"Cannot read {self._url(key)}", self.bucket):
            blob = self.client.bucket(self.bucket).blob(key)
            data: bytes = blob.download_as_bytes(timeout=TIMEOUT, retry=_retry())
            return data


def open_repository(url: str, cache_dir: Path) -> RemoteRepository:
    bucket, prefix = split_url(url, SCHEMES)
    return RemoteRepository(url, backend(bucket), prefix, cache_dir)


def read_file(url: str) -> bytes:
    bucket, key = split_url(url, SCHEMES)
    return backend(bucket).read(object_key(key, url))


def backend(bucket: str) -> Backend:
    """The REST client when gcs_rest.choose() accepts the environment, else the SDK's."""
    where = gcs_rest.choose()
    return GcsBackend(bucket) if where is None else gcs_rest.GcsRestBackend(bucket, where)
