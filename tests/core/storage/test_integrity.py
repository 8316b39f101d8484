"""End-to-end integrity on the REST clients: bytes changed on the way fail the download with a
clear error and leave no file in the cache, whole and ranged, on S3, GCS and Azure; and S3
listing keys are decoded only when the server says it encoded them."""

from __future__ import annotations

import io
import logging
import os
import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus
from xml.sax.saxutils import escape

import pytest

from core.errors import StorageError
from core.storage import download, open_repository, s3
from core.storage.s3 import rest as s3_rest
from tests.core.storage.helpers import (
    STORES,
    Front,
    Store,
    forward,
    use_store_env,
    use_store_env_again,
)
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


BIG = download.RANGED_MIN_BYTES + download.PART_BYTES + 5
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


class OneByteFront(Front):
    """Forwards every GET and HEAD to the emulator on `port`. Flips the object's byte at
    offset `at` in the one ranged answer that carries it. With `plain`, as a service that
    names no digest: drops every one the answers and listings name (x-amz-checksum-*,
    Content-MD5, x-ms-blob-content-md5) and marks S3 objects SSE-KMS (whose ETag is no MD5)."""

    def __init__(self, port: int, at: int | None = None, plain: bool = False) -> None:
        self.port, self.at, self.plain = port, at, plain
        self.flipped = 0
        super().__init__()

    def answer(self, request: Any) -> tuple[int, dict[str, str], bytes]:
        status, headers, body = forward(
            self.port, request.path, dict(request.headers), request.command
        )
        if self.plain:
            headers = {k: v for k, v in headers.items() if not _digest_header(k)}
            if "x-amz-request-id" in {k.lower() for k in headers} or "ETag" in headers:
                headers["x-amz-server-side-encryption"] = "aws:kms"
            body = re.sub(rb"<Content-MD5>[^<]*</Content-MD5>", b"", body)
        first = _range_start(headers)
        if status == 206 and self.at is not None and first <= self.at < first + len(body):
            i = self.at - first
            body = body[:i] + bytes([body[i] ^ 0x01]) + body[i + 1 :]
            self.flipped += 1
        return status, headers, body


def _digest_header(name: str) -> bool:
    name = name.lower()
    return name.startswith("x-amz-checksum-") or name in ("content-md5", "x-ms-blob-content-md5")


def _range_start(headers: dict[str, str]) -> int:
    """Where a ranged answer's bytes start in the object (-1: no Content-Range)."""
    for name, value in headers.items():
        if name.lower() == "content-range":
            return int(value.split()[1].split("-")[0])
    return -1


def _put_big(store: Store, key: str, data: bytes, upload: str) -> None:
    """`data` at `key`, as `upload` says: "one-put" (one PUT), "parts-<MiB>" (a multipart
    upload in parts of that size), "blocks" (Azure: 4 MiB blocks, no Content-MD5); "-etag":
    without the CRC32 botocore sends by default (the object has its ETag alone)."""
    if store.scheme == "az":
        if upload != "blocks":
            store.put(key, data)
            return
        from azure.storage.blob import ContainerClient

        blocks = ContainerClient.from_connection_string(
            store.emulator.env["AZURE_STORAGE_CONNECTION_STRING"],
            store.bucket,
            max_single_put_size=4 << 20,
            max_block_size=4 << 20,
        )
        blocks.upload_blob(key, data)
        return
    import boto3
    from boto3.s3.transfer import TransferConfig
    from botocore.config import Config

    checksum = "when_required" if upload.endswith("-etag") else "when_supported"
    client = boto3.client(
        "s3",
        endpoint_url=store.emulator.endpoint,
        config=Config(request_checksum_calculation=checksum),
    )
    if upload.startswith("one-put"):
        client.put_object(Bucket=store.bucket, Key=key, Body=data)
        return
    part = int(upload.removeprefix("parts-").removesuffix("-etag")) << 20
    config = TransferConfig(multipart_threshold=part, multipart_chunksize=part)
    client.upload_fileobj(io.BytesIO(data), store.bucket, key, Config=config)


def _big_version(store: Store, upload: str) -> bytes:
    """Version 1 of model `m` with a model.bin read in ranges, uploaded as `upload` says; ->
    its bytes."""
    data = os.urandom(BIG)
    store.put("m/1/model.xml", b"<net/>")
    _put_big(store, "m/1/model.bin", data, upload)
    return data


NOT_VERIFIED = "not verified"
PARTS = download.PART_BYTES >> 20  # the ranges' size, MiB
RANGED = [  # scheme, upload, the digest a flipped byte fails
    ("s3", f"parts-{PARTS}", "composite x-amz-checksum-crc32, of its 4 parts'"),
    ("s3", f"parts-{PARTS}-etag", "multipart ETag, the MD5 of its 4 parts' MD5s"),
    ("s3", "one-put", "x-amz-checksum-crc32"),
    ("s3", "one-put-etag", "ETag"),
    ("az", "one-put", "x-ms-blob-content-md5"),
    ("az", "blocks", "Content-MD5 of the range"),
]


@pytest.mark.parametrize(
    ("scheme", "upload", "source"), RANGED, ids=[f"{s}-{u}" for s, u, _ in RANGED]
)
def test_a_big_file_in_ranges_is_verified_and_one_flipped_byte_in_one_range_is_refused(
    scheme: str,
    upload: str,
    source: str,
    emulators: dict[str, Emulator],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    store = use_store_env(monkeypatch, emulators[scheme], scheme)
    data = _big_version(store, upload)
    good = OneByteFront(store.emulator.port)
    bad = OneByteFront(store.emulator.port, at=download.PART_BYTES + 12345)
    try:
        with caplog.at_level(logging.DEBUG, logger="ov_serverless.storage"):
            url = _through(good, store, monkeypatch)
            folder = open_repository(url, tmp_path / "good").fetch(1).folder
        assert (folder / "model.bin").read_bytes() == data
        assert NOT_VERIFIED not in caplog.text
        with pytest.raises(
            StorageError,
            match=r"Cannot download \w+://.*/m/1/model\.bin: (bytes \d+-\d+: )?the downloaded "
            r"bytes do not match the object's (MD5|CRC32) \(" + re.escape(source) + r"\): got "
            r".*, expected",
        ) as refused:
            open_repository(_through(bad, store, monkeypatch), tmp_path / "bad").fetch(1)
    finally:
        good.close()
        bad.close()
    assert bad.flipped == 1
    assert str(tmp_path) not in str(refused.value)
    left = [p.name for p in (tmp_path / "bad").rglob("*") if p.is_file()]
    assert not [name for name in left if "model" in name], left


PLAIN = [
    ("s3", "one-put", True),  # SSE-KMS (no MD5 ETag), and no checksum in its HEAD
    ("s3", f"parts-{PARTS}", True),
    ("s3", "parts-7", False),  # as many parts as ranges, of other sizes: its digests tell nothing
    ("s3", "parts-7-etag", False),
    ("az", "one-put", True),  # no Content-MD5 listed, nor of its ranges
]


@pytest.mark.parametrize(
    ("scheme", "upload", "plain"), PLAIN, ids=[f"{s}-{u}-{p}" for s, u, p in PLAIN]
)
def test_a_big_file_whose_service_names_no_checksum_of_its_ranges_still_downloads(
    scheme: str,
    upload: str,
    plain: bool,
    emulators: dict[str, Emulator],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    store = use_store_env(monkeypatch, emulators[scheme], scheme)
    data = _big_version(store, upload)
    front = OneByteFront(store.emulator.port, plain=plain)
    try:
        with caplog.at_level(logging.DEBUG, logger="ov_serverless.storage"):
            url = _through(front, store, monkeypatch)
            folder = open_repository(url, tmp_path / "cache").fetch(1).folder
    finally:
        front.close()
    assert (folder / "model.bin").read_bytes() == data
    assert f"model.bin: {NOT_VERIFIED}" in caplog.text


class DropOnceFront(Front):
    """A front whose first ranged answer holding byte `at` has that byte flipped and stops
    halfway (the connection closes: the client retries the range); the retry, clean, comes
    `delay` seconds later, so the in-order hash has read the failed attempt's bytes by then."""

    def __init__(self, port: int, at: int, delay: float) -> None:
        self.port, self.at, self.delay = port, at, delay
        self.dropped = 0
        super().__init__()

    def answer(self, request: Any) -> tuple[int, dict[str, str], bytes]:
        status, headers, body = forward(
            self.port, request.path, dict(request.headers), request.command
        )
        first = _range_start(headers)
        if status != 206 or not first <= self.at < first + len(body):
            return status, headers, body
        if self.dropped:
            time.sleep(self.delay)
            return status, headers, body
        self.dropped += 1
        i = self.at - first
        body = body[:i] + bytes([body[i] ^ 0x01]) + body[i + 1 :]
        request.close_connection = True
        return status, {**headers, "Content-Length": str(len(body))}, body[: len(body) // 2]


@pytest.mark.parametrize(("scheme", "upload"), [("s3", "one-put"), ("az", "one-put")])
def test_a_range_retried_after_a_corrupt_start_still_verifies(
    scheme: str,
    upload: str,
    emulators: dict[str, Emulator],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    store = use_store_env(monkeypatch, emulators[scheme], scheme)
    data = _big_version(store, upload)
    front = DropOnceFront(store.emulator.port, at=download.PART_BYTES + 100, delay=1.0)
    try:
        url = _through(front, store, monkeypatch)
        folder = open_repository(url, tmp_path / "cache").fetch(1).folder
    finally:
        front.close()
    assert front.dropped == 1
    assert (folder / "model.bin").read_bytes() == data


@pytest.mark.parametrize("name", ["s3", "az", "az-sdk"])  # the GCS emulator ignores `generation`:
def test_a_small_file_replaced_after_its_listing_fails_its_download(  # test_gcs_rest checks it
    name: str, emulators: dict[str, Emulator], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An upload over a version while it is fetched: a file whose content changed (same size)
    since the listing the version's folder is named by fails, as a big file's ranges do, and
    the next poll fetches the new one; it was downloaded, mixing two uploads in one folder."""
    store = use_store_env(monkeypatch, emulators[STORES[name].scheme], name)
    store.put("m/1/model.xml", b"<net old/>")
    backend = open_repository(store.url("m"), tmp_path / "cache").backend  # type: ignore[attr-defined]
    [listed] = list(backend.list_objects("m/1/"))
    store.put("m/1/model.xml", b"<net new/>")
    dest = tmp_path / "model.xml"
    with pytest.raises(StorageError, match=r"/m/1/model.xml: the object changed or was deleted"):
        backend.download(listed, dest)
    [again] = list(backend.list_objects("m/1/"))
    backend.download(again, dest)
    assert dest.read_bytes() == b"<net new/>"
