"""Azure Blob Storage: core.storage.azure_rest for a connection string or a SAS URL, else
azure-storage-blob (a managed identity, OVS_AZURE_CLIENT=sdk), imported only here, lazily.

URLs: `az://container/prefix`, `azure://container/prefix`; `azfs://container/prefix` is read as
blob storage too (OVMS maps azfs:// to Azure Files shares; those are not supported here).
Credentials, first match wins: AZURE_STORAGE_CONNECTION_STRING (as OVMS); or an account URL
(AZURE_STORAGE_ACCOUNT_URL, or https://$AZURE_STORAGE_ACCOUNT_NAME.blob.core.windows.net)
that carries a SAS token, or else DefaultAzureCredential from azure-identity when installed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from core.storage import azure_rest
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

SCHEMES = ("az", "azure", "azfs")
_DENIED_STATUS = {401, 403}


def _account_url() -> str | None:
    # a value read from a mounted secret file may end in a newline: never part of the URL
    url = (os.environ.get("AZURE_STORAGE_ACCOUNT_URL") or "").strip()
    name = os.environ.get("AZURE_STORAGE_ACCOUNT_NAME") or os.environ.get("AZURE_STORAGE_ACCOUNT")
    return url or (f"https://{name}.blob.core.windows.net" if name else None)


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
    url = _account_url()
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
        if getattr(exc, "error_code", None) == "ContainerNotFound":
            raise StorageError(f"{what}: container '{container}' does not exist") from exc
        raise StorageError(f"{what}: object not found") from exc
    except az.ClientAuthenticationError as exc:
        raise StorageError(f"{what}: access denied: {_first_line(exc)}") from exc
    except az.HttpResponseError as exc:
        if exc.status_code in _DENIED_STATUS:
            raise StorageError(f"{what}: access denied: {_first_line(exc)}") from exc
        raise StorageError(f"{what}: {exc.status_code} {_first_line(exc)}") from exc
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
        with _errors(f"Cannot download {self._url(obj.key)}", self.bucket), dest.open("wb") as f:
            self.container.download_blob(obj.key, max_concurrency=4).readinto(f)

    def read(self, key: str) -> bytes:
        with _errors(f"Cannot read {self._url(key)}", self.bucket):
            data: bytes = self.container.download_blob(key).readall()
            return data


def open_repository(url: str, cache_dir: Path) -> RemoteRepository:
    container, prefix = split_url(url, SCHEMES)
    return RemoteRepository(url, backend(container), prefix, cache_dir)


def read_file(url: str) -> bytes:
    container, key = split_url(url, SCHEMES)
    return backend(container).read(object_key(key, url))


def backend(container: str) -> Backend:
    """The REST client when azure_rest.choose() accepts the environment, else the SDK's."""
    account = azure_rest.choose(os.environ.get("AZURE_STORAGE_CONNECTION_STRING"), _account_url())
    if account is None:
        return AzureBackend(container)
    return azure_rest.AzureRestBackend(container, account)
