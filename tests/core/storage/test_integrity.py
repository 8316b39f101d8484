"""End-to-end integrity on the REST clients: bytes changed on the way fail the download with a
clear error and leave no file in the cache, whole and ranged, on S3, GCS and Azure; and S3
listing keys are decoded only when the server says it encoded them."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus
from xml.sax.saxutils import escape

import pytest

from core.errors import StorageError
from core.storage import http_client, open_repository, s3
from core.storage.s3 import rest as s3_rest
from tests.core.storage.helpers import Front, Store, forward, use_store_env, use_store_env_again
from tests.emulators import Emulator

REST = ("s3", "gs", "az")


class CorruptingFront(Front):
    """Forwards to the emulator on `port`; flips one byte of every object body it passes."""

    def __init__(self, port: int, scheme: str) -> None:
        self.port, self.scheme = port, scheme
        self.corrupted = 0
        super().__init__()

    def is_object(self, path: str) -> bool:
        if self.scheme == "s3":
            return "list-type=" not in path
        if self.scheme == "gs":
            return path.startswith("/download/")
        return "comp=list" not in path

    def answer(self, request: Any) -> tuple[int, dict[str, str], bytes]:
        status, headers, body = forward(self.port, request.path, dict(request.headers))
        if status < 300 and body and self.is_object(request.path):
            self.corrupted += 1
            middle = len(body) // 2
            body = body[:middle] + bytes([body[middle] ^ 0x01]) + body[middle + 1 :]
        return status, headers, body


def _through(front: Front, store: Store, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point `store`'s REST client at `front`; -> the model URL to read through it."""
    if store.scheme == "s3":
        return f"s3://{front.host}/{store.bucket}/m"
    if store.scheme == "gs":
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://{front.host}")
        return store.url("m")
    monkeypatch.setenv(
        "AZURE_STORAGE_CONNECTION_STRING",
        store.emulator.env["AZURE_STORAGE_CONNECTION_STRING"].replace(
            f"BlobEndpoint={store.emulator.endpoint}/", f"BlobEndpoint=http://{front.host}/"
        ),
    )
    return store.url("m")


BIG = http_client.RANGED_MIN_BYTES + http_client.PART_BYTES + 5
CASES = [
    *((scheme, 64 << 10) for scheme in REST),
    ("gs", BIG),
]  # a big file in ranges: only a CRC is checked (Cloud Storage's CRC32C)


@pytest.mark.parametrize(("scheme", "size"), CASES, ids=[f"{s}-{n}" for s, n in CASES])
def test_bytes_changed_on_the_way_fail_the_download_and_leave_no_file(
    scheme: str,
    size: int,
    emulators: dict[str, Emulator],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    store = use_store_env(monkeypatch, emulators[scheme], scheme)
    data = os.urandom(size)
    store.put("m/1/model.xml", b"<net/>")
    store.put("m/1/model.bin", data)
    front = CorruptingFront(store.emulator.port, scheme)
    try:
        url = _through(front, store, monkeypatch)
        with pytest.raises(
            StorageError,
            match=r"Cannot download \w+://.*/m/1/model\.bin: the "
            r"downloaded bytes do not match the object's "
            r"(MD5|CRC32C?|SHA256) \(.+\): got .*, expected",
        ):
            open_repository(url, tmp_path / "cache").fetch(1)
    finally:
        front.close()
    assert front.corrupted
    left = [p.name for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert not [name for name in left if "model" in name], left
    # the same objects, read straight from the emulator, pass the check
    use_store_env_again(monkeypatch, store)
    folder = open_repository(store.url("m"), tmp_path / "again").fetch(1).folder
    assert (folder / "model.bin").read_bytes() == data


class ListingFront(Front):
    """Forwards to moto; with `plain`, as an S3 endpoint that ignores encoding-type=url: it
    answers ListObjectsV2 with the keys as they are and no EncodingType (moto's answer,
    decoded and stripped)."""

    def __init__(self, port: int, plain: bool) -> None:
        self.port, self.plain = port, plain
        super().__init__()

    def answer(self, request: Any) -> tuple[int, dict[str, str], bytes]:
        status, headers, body = forward(self.port, request.path, dict(request.headers))
        if self.plain and "list-type=" in request.path and status == 200:
            text = body.decode().replace("<EncodingType>url</EncodingType>", "")
            text = re.sub(
                r"<Key>(.*?)</Key>",
                lambda m: f"<Key>{escape(unquote_plus(m.group(1)))}</Key>",
                text,
            )
            body = text.encode()
        return status, headers, body


ODD = ("m/1/a+b.bin", "m/1/100%.txt", "m/1/c%2Bd e.bin")


@pytest.mark.parametrize("echoed", [True, False], ids=["encoded", "as-is"])
def test_s3_listing_keys_are_decoded_only_when_the_server_encoded_them(
    echoed: bool, emulators: dict[str, Emulator], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = use_store_env(monkeypatch, emulators["s3"], "s3")
    for key in ODD:
        store.put(key, key.encode())
    front = ListingFront(store.emulator.port, plain=not echoed)
    try:
        rest = s3.backend(store.bucket, f"http://{front.host}")
        assert isinstance(rest, s3_rest.S3RestBackend)
        assert sorted(o.key for o in rest.list_objects("m/")) == sorted(ODD)
    finally:
        front.close()
