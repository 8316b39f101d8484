"""A storage endpoint that dies fails fast with a StorageError, and works again once back."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from core.errors import StorageError
from core.storage import open_repository, read_file
from tests.core.storage.helpers import Answer, Front, Store, use_env
from tests.emulators import AZURITE_ACCOUNT, AZURITE_KEY

FAIL_WITHIN_S = 10.0


def test_dead_endpoint_fails_fast_then_recovers(own_store: Store, cache_dir: Path) -> None:
    store, own_emulator, scheme = own_store, own_store.emulator, own_store.scheme
    store.put_version("model", 1, 2.0)
    repo = open_repository(store.url("model"), cache_dir)
    assert sorted(repo.versions()) == [1]

    own_emulator.kill()
    for attempt in (repo.versions, lambda: repo.fetch(1), lambda: read_file(store.url("x.json"))):
        started = time.monotonic()
        with pytest.raises(StorageError) as err:
            attempt()
        elapsed = time.monotonic() - started
        assert elapsed < FAIL_WITHIN_S, f"took {elapsed:.1f} s: {err.value}"
        assert store.bucket in str(err.value)
        assert "cannot reach" in str(err.value)
    assert not (cache_dir / scheme / store.bucket / "model").exists() or not any(
        (cache_dir / scheme / store.bucket / "model").iterdir()
    )

    own_emulator.start()  # same port, empty (in-memory): seed again
    store.create().put_version("model", 1, 2.0)
    assert sorted(repo.versions()) == [1]
    assert (repo.fetch(1).folder / "model.bin").is_file()


# --- an endpoint that answers 200 with something else than a listing -----------------------

PAGE = b"<!DOCTYPE html><html><body><p>MinIO Console<br></body></html>"
BAD_LISTINGS = {
    "s3": b"<ListBucketResult><Contents><Key>m/1/a</Key><Size>big</Size></Contents>"
    b"</ListBucketResult>",
    "gs": b'{"items": [{"size": "1"}]}',
    "az": b"<EnumerationResults><Blobs><Blob><Name>m/1/a</Name><Properties>"
    b"<Content-Length>big</Content-Length></Properties></Blob></Blobs></EnumerationResults>",
}


class WebPage(Front):
    """Answers every request 200 with `body`: a web server on the wrong port (MinIO's
    console), a proxy's page, a service that is not the storage API."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        super().__init__()

    def answer(self, request: Any) -> Answer:
        return 200, {"Content-Type": "text/html"}, self.body


def _aim(scheme: str, endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The REST client of `scheme` aimed at `endpoint`; -> a model URL there."""
    use_env(monkeypatch, SimpleNamespace(env={}))
    if scheme == "s3":
        for name, value in {
            "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
            "AWS_SECRET_ACCESS_KEY": "example-secret",
            "AWS_DEFAULT_REGION": "us-east-1",
            "S3_ENDPOINT": endpoint,
        }.items():
            monkeypatch.setenv(name, value)
    elif scheme == "gs":
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", endpoint)
        monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "p")
    else:
        monkeypatch.setenv(
            "AZURE_STORAGE_CONNECTION_STRING",
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
            f"AccountKey={AZURITE_KEY};BlobEndpoint={endpoint}/{AZURITE_ACCOUNT};",
        )
    return f"{scheme}://bucket/m"


@pytest.mark.parametrize("scheme", ["s3", "gs", "az"])
@pytest.mark.parametrize("what", ["web page", "bad listing"])
def test_an_answer_that_is_no_listing_is_a_storage_error_naming_the_endpoint(
    scheme: str, what: str, monkeypatch: pytest.MonkeyPatch, cache_dir: Path
) -> None:
    page = WebPage(PAGE if what == "web page" else BAD_LISTINGS[scheme])
    try:
        url = _aim(scheme, f"http://{page.host}", monkeypatch)
        with pytest.raises(StorageError) as info:
            open_repository(url, cache_dir).versions()
    finally:
        page.close()
    message = info.value.message
    assert message.startswith(f"Cannot list {url}/"), message
    assert "is not a listing" in message and "check the endpoint" in message, message
