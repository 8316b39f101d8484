"""Google Cloud Storage: URLs, the choice of client and the words of its errors. The REST
client (rest.py) reads on Cloud Run (the metadata server's token) and for the emulator, else
google-cloud-storage (sdk.py, imported only then); `OVS_GCS_CLIENT=auto|sdk|rest`
(core.storage.clients) overrides the choice.

URL: `gs://bucket/prefix`. Credentials: Application Default Credentials
(GOOGLE_APPLICATION_CREDENTIALS, gcloud, the metadata server on Cloud Run / GKE); with none
found, anonymous access (public buckets). With `STORAGE_EMULATOR_HOST` set (the SDK's own
emulator switch, e.g. http://127.0.0.1:9023), anonymous credentials and the project from
GOOGLE_CLOUD_PROJECT (or a placeholder).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from core.storage import clients
from core.storage.backend import Backend, object_key, split_url
from core.storage.bucket import BucketRepository

if TYPE_CHECKING:
    from core.storage.gcs.rest import Where

SCHEMES = ("gs",)
VARIABLE = "OVS_GCS_CLIENT"


def not_found(bucket: str, listing: bool) -> str:
    """A 404's cause, as both clients word it: a listing only 404s for the bucket."""
    return f"bucket '{bucket}' does not exist" if listing else "object not found"


def choose() -> Where | None:
    """Where the REST client reads, or None for the SDK (OVS_GCS_CLIENT)."""

    def rest_setup() -> Where | str:
        from core.storage.gcs import rest

        return rest.from_environment()

    return clients.choose(VARIABLE, rest_setup)


def backend(bucket: str) -> Backend:
    """The client choose() picks for the bucket."""
    where = choose()
    if where is None:
        from core.storage.gcs.sdk import GcsBackend

        return GcsBackend(bucket)
    from core.storage.gcs.rest import GcsRestBackend

    return GcsRestBackend(bucket, where)


def open_repository(url: str, cache_dir: Path) -> BucketRepository:
    bucket, prefix = split_url(url, SCHEMES)
    return BucketRepository.connected(url, lambda: backend(bucket), prefix, cache_dir)


def read_file(url: str) -> bytes:
    bucket, key = split_url(url, SCHEMES)
    return backend(bucket).read(object_key(key, url))
