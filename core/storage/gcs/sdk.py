"""Cloud Storage through google-cloud-storage (imported here only, when this client is
chosen): Application Default Credentials, else anonymous; the emulator anonymously; with this
project's timeouts and retries, and the SDK's failures in the words of the REST client."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from core.storage.backend import CONNECT_TIMEOUT_S, READ_TIMEOUT_S, RETRIES, RemoteObject
from core.storage.gcs import not_found
from core.storage.secrets import StorageError

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
        raise StorageError(f"{what}: {not_found(bucket, listing)}") from exc
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
