"""Azure Blob Storage through azure-storage-blob (imported here only, when this client is
chosen): a connection string, a SAS account URL or DefaultAzureCredential (azure-identity),
with this project's timeouts and retries, and the SDK's failures in the words of
core.storage.azure.describe."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from core.storage.azure import DENIED_STATUS, account_url, describe
from core.storage.backend import CONNECT_TIMEOUT_S, READ_TIMEOUT_S, RETRIES, RemoteObject
from core.storage.secrets import StorageError


def make_service() -> Any:
    from azure.storage.blob import BlobServiceClient, LinearRetry

    options: dict[str, Any] = {
        "connection_timeout": CONNECT_TIMEOUT_S,
        "read_timeout": READ_TIMEOUT_S,
        "retry_policy": LinearRetry(backoff=1, retry_total=RETRIES, random_jitter_range=1),
    }
    conn = (os.environ.get("AZURE_STORAGE_CONNECTION_STRING") or "").strip()
    if conn:
        with _errors("Invalid AZURE_STORAGE_CONNECTION_STRING", ""):
            return BlobServiceClient.from_connection_string(conn, **options)
    url = account_url()
    if not url:
        raise StorageError(
            "Azure Blob Storage needs AZURE_STORAGE_CONNECTION_STRING, or "
            "AZURE_STORAGE_ACCOUNT_URL / AZURE_STORAGE_ACCOUNT_NAME with azure-identity installed"
        )
    if "?" in url:  # the URL carries a SAS token
        return BlobServiceClient(url, **options)
    try:
        from azure.identity import DefaultAzureCredential
    except ImportError as exc:
        raise StorageError(
            f"Azure account {url} without a SAS token needs the azure-identity package "
            "(or set AZURE_STORAGE_CONNECTION_STRING)"
        ) from exc
    return BlobServiceClient(url, credential=DefaultAzureCredential(), **options)


@contextmanager
def _errors(what: str, container: str) -> Iterator[None]:
    from azure.core import exceptions as az

    try:
        yield
    except az.ResourceNotFoundError as exc:
        code = str(getattr(exc, "error_code", None) or "")
        raise StorageError(f"{what}: {describe(404, code, '', container)}") from exc
    except az.ClientAuthenticationError as exc:
        raise StorageError(f"{what}: {describe(401, '', _first_line(exc), container)}") from exc
    except az.HttpResponseError as exc:
        if exc.status_code in DENIED_STATUS or exc.status_code == 412:
            cause = describe(exc.status_code, "", _first_line(exc), container)
        else:
            cause = f"{exc.status_code} {_first_line(exc)}"
        raise StorageError(f"{what}: {cause}") from exc
    except (az.ServiceRequestError, az.ServiceResponseError) as exc:
        raise StorageError(f"{what}: cannot reach Azure Blob Storage: {exc}") from exc
    except (az.AzureError, ValueError) as exc:
        raise StorageError(f"{what}: {_first_line(exc)}") from exc


def _first_line(exc: Exception) -> str:
    text = str(getattr(exc, "message", None) or exc)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


class AzureBackend:
    scheme = "az"

    def __init__(self, container: str) -> None:
        self.bucket = container
        self._container: Any = None

    @property
    def container(self) -> Any:
        if self._container is None:
            self._container = make_service().get_container_client(self.bucket)
        return self._container

    def _url(self, key: str) -> str:
        return f"az://{self.bucket}/{key}"

    def list_objects(self, prefix: str) -> Iterator[RemoteObject]:
        with _errors(f"Cannot list {self._url(prefix)}", self.bucket):
            for blob in self.container.list_blobs(name_starts_with=prefix or None):
                yield RemoteObject(blob.name, int(blob.size), str(blob.etag))

    def download(self, obj: RemoteObject, dest: Path) -> None:
        """The blob as listed (If-Match its ETag): one replaced since fails (412)."""
        from azure.core import MatchConditions

        listed = {"etag": obj.tag, "match_condition": MatchConditions.IfNotModified}
        with _errors(f"Cannot download {self._url(obj.key)}", self.bucket), dest.open("wb") as f:
            self.container.download_blob(obj.key, max_concurrency=4, **listed).readinto(f)

    def read(self, key: str) -> bytes:
        with _errors(f"Cannot read {self._url(key)}", self.bucket):
            data: bytes = self.container.download_blob(key).readall()
            return data
