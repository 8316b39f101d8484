"""URL parsing, endpoint resolution and fingerprints: pure functions, no emulator."""

from __future__ import annotations

import pytest

from core.errors import StorageError
from core.storage import azure, gcs, s3
from core.storage.backend import RemoteObject, relative_key, split_url
from core.storage.bucket import fingerprint


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("s3://bucket/some/model", (None, "bucket", "some/model")),
        ("s3://bucket/some/model/", (None, "bucket", "some/model")),
        ("s3://bucket", (None, "bucket", "")),
        ("S3://bucket/m", (None, "bucket", "m")),
        ("s3://minio:9000/bucket/m", ("http://minio:9000", "bucket", "m")),
        ("s3://s3.example.com:443/bucket/m", ("https://s3.example.com:443", "bucket", "m")),
    ],
)
def test_s3_urls(url: str, expected: tuple[str | None, str, str]) -> None:
    assert s3.parse_url(url) == expected


@pytest.mark.parametrize("url", ["s3://", "s3:///m", "s3://host:9000/", "gs://b/m"])
def test_bad_s3_urls(url: str) -> None:
    with pytest.raises(StorageError):
        s3.parse_url(url)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, (None, False)),
        ({"S3_ENDPOINT": "minio:9000"}, ("http://minio:9000", True)),
        ({"S3_ENDPOINT": "https://minio:9000"}, ("https://minio:9000", True)),
        ({"AWS_ENDPOINT_URL_S3": "http://x:1"}, (None, True)),  # boto3 reads it itself
        ({"AWS_ENDPOINT_URL": "http://x:1"}, (None, True)),
        ({"S3_ENDPOINT": "a:1", "AWS_ENDPOINT_URL_S3": "http://b:2"}, ("http://a:1", True)),
    ],
)
def test_s3_endpoint_resolution(
    env: dict[str, str], expected: tuple[str | None, bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert s3.resolve_endpoint(None) == expected
    assert s3.resolve_endpoint("http://h:1") == ("http://h:1", True)  # the URL's host wins


@pytest.mark.parametrize(
    ("url", "schemes", "expected"),
    [
        ("gs://bucket/a/b/", gcs.SCHEMES, ("bucket", "a/b")),
        ("az://container/a", azure.SCHEMES, ("container", "a")),
        ("azure://container/a", azure.SCHEMES, ("container", "a")),
        ("azfs://container", azure.SCHEMES, ("container", "")),
    ],
)
def test_bucket_urls(url: str, schemes: tuple[str, ...], expected: tuple[str, str]) -> None:
    assert split_url(url, schemes) == expected


def test_bucket_url_without_bucket() -> None:
    with pytest.raises(StorageError, match="Missing bucket"):
        split_url("gs:///m", gcs.SCHEMES)


@pytest.mark.parametrize("key", ["m/1/../../etc/passwd", "m/1/./x", "m/1/", "m/1//"])
def test_keys_that_leave_the_version_folder_are_refused(key: str) -> None:
    with pytest.raises(StorageError, match="Refusing"):
        relative_key(key, "m/1")


def test_relative_key() -> None:
    assert relative_key("m/1/sub/model.bin", "m/1") == "sub/model.bin"
    assert relative_key("1/model.bin", "1") == "model.bin"


def test_fingerprint_depends_on_content_tags_not_order_or_prefix() -> None:
    a = [RemoteObject("m/1/a", 1, "e1"), RemoteObject("m/1/b", 2, "e2")]
    assert fingerprint(a, "m/1") == fingerprint(a[::-1], "m/1")
    moved = [RemoteObject("n/1/a", 1, "e1"), RemoteObject("n/1/b", 2, "e2")]
    assert fingerprint(a, "m/1") == fingerprint(moved, "n/1")
    assert fingerprint(a, "m/1") != fingerprint([a[0], RemoteObject("m/1/b", 2, "e3")], "m/1")
    assert fingerprint(a, "m/1") != fingerprint([a[0], RemoteObject("m/1/b", 3, "e2")], "m/1")
    assert fingerprint(a, "m/1") != fingerprint(a[:1], "m/1")
