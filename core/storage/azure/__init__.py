"""Azure Blob Storage: URLs, credentials, the choice of client and the words of its errors.
The REST client (rest.py) reads for a connection string or a SAS URL, else azure-storage-blob
(sdk.py, imported only then: a managed identity); `OVS_AZURE_CLIENT=auto|sdk|rest`
(core.storage.clients) overrides the choice.

URLs: `az://container/prefix`, `azure://container/prefix`; `azfs://container/prefix` is read as
blob storage too (OVMS maps azfs:// to Azure Files shares; those are not supported here).
Credentials, first match wins: AZURE_STORAGE_CONNECTION_STRING (as OVMS); or an account URL
(AZURE_STORAGE_ACCOUNT_URL, or https://$AZURE_STORAGE_ACCOUNT_NAME.blob.core.windows.net)
that carries a SAS token, or else DefaultAzureCredential from azure-identity when installed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from core.storage import clients
from core.storage.backend import Backend, object_key, split_url
from core.storage.bucket import BucketRepository

if TYPE_CHECKING:
    from core.storage.azure.rest import Account

SCHEMES = ("az", "azure", "azfs")
VARIABLE = "OVS_AZURE_CLIENT"
DENIED_STATUS = frozenset({401, 403})


def account_url() -> str | None:
    """The account URL the environment names, if any (with its SAS token, if any)."""
    # a value read from a mounted secret file may end in a newline: never part of the URL
    url = (os.environ.get("AZURE_STORAGE_ACCOUNT_URL") or "").strip()
    name = os.environ.get("AZURE_STORAGE_ACCOUNT_NAME") or os.environ.get("AZURE_STORAGE_ACCOUNT")
    return url or (f"https://{name}.blob.core.windows.net" if name else None)


def describe(status: int | None, code: str, message: str, container: str) -> str:
    """The cause of a Blob Storage error in words, as both clients report it."""
    if status == 404:
        if code == "ContainerNotFound":
            return f"container '{container}' does not exist"
        return "object not found"
    if status in DENIED_STATUS:
        return f"access denied: {message}"
    if status == 412:  # If-Match the listed ETag
        return "the object changed or was deleted since it was listed (412)"
    return f"{status} {message}"


def choose(connection_string: str | None, url: str | None) -> Account | None:
    """The account the REST client reads, or None for the SDK (OVS_AZURE_CLIENT)."""

    def rest_setup() -> Account | str:
        from core.storage.azure import rest

        return rest.from_environment(connection_string, url)

    return clients.choose(VARIABLE, rest_setup)


def backend(container: str) -> Backend:
    """The client choose() picks for the container."""
    account = choose(os.environ.get("AZURE_STORAGE_CONNECTION_STRING"), account_url())
    if account is None:
        from core.storage.azure.sdk import AzureBackend

        return AzureBackend(container)
    from core.storage.azure.rest import AzureRestBackend

    return AzureRestBackend(container, account)


def open_repository(url: str, cache_dir: Path) -> BucketRepository:
    container, prefix = split_url(url, SCHEMES)
    return BucketRepository.connected(url, lambda: backend(container), prefix, cache_dir)


def read_file(url: str) -> bytes:
    container, key = split_url(url, SCHEMES)
    return backend(container).read(object_key(key, url))
