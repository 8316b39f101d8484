"""The S3 REST client (core.storage.s3_rest) against moto: signatures moto checks as AWS does,
temporary (Lambda) credentials, listings identical to boto3's, ranged downloads, and the rule
that picks it over boto3."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from core.errors import StorageError
from core.storage import download, http_client, open_repository, s3
from core.storage.s3 import rest as s3_rest
from core.storage.s3 import sdk as s3_sdk
from tests.core.storage.helpers import (
    Answer,
    Front,
    S3Store,
    Store,
    forward,
    modules_of_a_fetch,
    read_version_1,
    use_env,
)
from tests.emulators import Emulator

ODD_KEYS = ("a b+c%d=e.bin", "é/ü~x.txt", "semi;colon,comma&amp.txt")


@pytest.fixture
def s3_store(emulators: dict[str, Emulator], monkeypatch: pytest.MonkeyPatch) -> Store:
    use_env(monkeypatch, emulators["s3"])
    return S3Store(emulators["s3"]).create()


def _boto3(**client: Any) -> Any:
    import boto3

    return boto3.client(**client)


def _auth_after(store: Store, requests: int) -> None:
    url = f"{store.emulator.endpoint}/moto-api/reset-auth"
    request = urllib.request.Request(
        url, data=str(requests).encode(), method="POST", headers={"Content-Type": "text/plain"}
    )
    urllib.request.urlopen(request, timeout=10).read()


def _reader_keys(store: Store) -> dict[str, str]:
    """An IAM user's access key and an assumed role's temporary credentials (as Lambda's),
    both allowed to read S3."""
    endpoint = store.emulator.endpoint
    iam = _boto3(service_name="iam", endpoint_url=endpoint)
    allow = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
    }
    name = f"reader-{store.bucket}"
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName="s3", PolicyDocument=json.dumps(allow))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    trust = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}],
    }
    role = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]
    iam.put_role_policy(RoleName=name, PolicyName="s3", PolicyDocument=json.dumps(allow))
    sts = _boto3(service_name="sts", endpoint_url=endpoint)
    temp = sts.assume_role(RoleArn=role["Arn"], RoleSessionName="lambda")["Credentials"]
    return {
        "user_key": key["AccessKeyId"],
        "user_secret": key["SecretAccessKey"],
        "role_key": temp["AccessKeyId"],
        "role_secret": temp["SecretAccessKey"],
        "role_token": temp["SessionToken"],
    }


def test_signed_requests_pass_moto_checks_for_user_and_role_keys(
    s3_store: Store, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = s3_store.put_version("m", 1, 2.0)
    for key in ODD_KEYS:
        s3_store.put(f"m/1/{key}", key.encode())
    keys = _reader_keys(s3_store)
    expected = {**files, **{key: key.encode() for key in ODD_KEYS}}
    _auth_after(s3_store, 0)
    try:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", keys["user_key"])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", keys["user_secret"])
        assert isinstance(s3.backend(s3_store.bucket, None), s3_rest.S3RestBackend)
        assert read_version_1(s3_store, cache_dir / "user") == expected

        monkeypatch.setenv("AWS_ACCESS_KEY_ID", keys["role_key"])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", keys["role_secret"])
        monkeypatch.setenv("AWS_SESSION_TOKEN", keys["role_token"])
        assert read_version_1(s3_store, cache_dir / "role") == expected
    finally:
        _auth_after(s3_store, 10**9)


@pytest.mark.parametrize("client", ["auto", "boto3"])
def test_a_wrong_secret_is_the_same_access_denied_on_both_clients(
    s3_store: Store, cache_dir: Path, monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    s3_store.put_version("m", 1, 2.0)
    keys = _reader_keys(s3_store)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", keys["user_key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    monkeypatch.setenv("OVS_S3_CLIENT", client)
    _auth_after(s3_store, 0)
    try:
        with pytest.raises(StorageError) as err:
            open_repository(s3_store.url("m"), cache_dir).versions()
    finally:
        _auth_after(s3_store, 10**9)
    assert str(err.value).startswith(
        f"Cannot list s3://{s3_store.bucket}/m/: access denied "
        "(SignatureDoesNotMatch): The request signature"
    )


def test_listing_pages_and_odd_keys_match_boto3(
    s3_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"m/1/part-{i:04d}.bin" for i in range(1003)] + [f"m/1/{k}" for k in ODD_KEYS]
    client = s3_store.client  # type: ignore[attr-defined]
    for name in names:
        client.put_object(Bucket=s3_store.bucket, Key=name, Body=name.encode())
    rest = s3.backend(s3_store.bucket, None)
    monkeypatch.setenv("OVS_S3_CLIENT", "boto3")
    boto = s3.backend(s3_store.bucket, None)
    assert isinstance(rest, s3_rest.S3RestBackend) and isinstance(boto, s3_sdk.S3Backend)
    listed = list(rest.list_objects("m/"))
    assert listed == list(boto.list_objects("m/"))  # keys, sizes and ETags: blob keys agree
    assert sorted(o.key for o in listed) == sorted(names)


def test_big_file_downloads_in_ranges_and_a_replaced_one_fails(
    s3_store: Store, tmp_path: Path
) -> None:
    data = os.urandom(download.RANGED_MIN_BYTES + download.PART_BYTES // 2 + 3)
    s3_store.put("m/1/big.bin", data)
    rest = s3.backend(s3_store.bucket, None)
    [obj] = rest.list_objects("m/1/big.bin")
    rest.download(obj, tmp_path / "big.bin")
    assert (tmp_path / "big.bin").read_bytes() == data

    s3_store.put("m/1/big.bin", data[::-1])  # a new ETag: the listed one no longer matches
    with pytest.raises(
        StorageError,
        match=r"Cannot download s3://.*/m/1/big.bin: "
        r"the object changed or was deleted since it was listed \(PreconditionFailed\)",
    ):
        rest.download(obj, tmp_path / "again.bin")


def test_missing_key_and_bucket_read_as_on_boto3(s3_store: Store) -> None:
    rest = s3.backend(s3_store.bucket, None)
    with pytest.raises(StorageError, match=r"s3://.*/nothing.json: object not found"):
        rest.read("nothing.json")
    with pytest.raises(StorageError, match="bucket 'no-such-bucket-here' does not exist"):
        s3.backend("no-such-bucket-here", None).read("x")


@pytest.mark.parametrize(
    ("env", "rest"),
    [
        ({}, True),
        ({"OVS_S3_CLIENT": "boto3"}, False),
        ({"OVS_S3_CLIENT": "sdk"}, False),
        ({"OVS_S3_CLIENT": "rest"}, True),
        ({"AWS_PROFILE": "dev"}, False),
        ({"AWS_USE_FIPS_ENDPOINT": "true"}, False),
        ({"HTTPS_PROXY": "http://proxy:3128"}, False),
        ({"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "example.org,127.0.0.1"}, True),
        ({"AWS_SECRET_ACCESS_KEY": ""}, False),
    ],
)
def test_which_client_reads_the_bucket(
    s3_store: Store, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], rest: bool
) -> None:
    for name in ("NO_PROXY", "no_proxy", "https_proxy", "http_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    chosen = s3.backend(s3_store.bucket, None)
    assert isinstance(chosen, s3_rest.S3RestBackend) is rest


def test_an_unknown_client_setting_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OVS_S3_CLIENT", "boto")
    with pytest.raises(
        StorageError,
        match=r"OVS_S3_CLIENT must be auto, sdk or rest "
        r"\(boto3 is sdk\), not 'boto'",
    ):
        s3.backend("bucket", "http://127.0.0.1:9")


def test_aws_addressing() -> None:
    assert s3_rest.target("models", None, "eu-west-1") == s3_rest.Target(
        "https://models.s3.eu-west-1.amazonaws.com", ""
    )
    assert s3_rest.target("my.models", None, "cn-north-1") == s3_rest.Target(
        "https://s3.cn-north-1.amazonaws.com.cn", "/my.models"
    )
    assert s3_rest.target("Old_Bucket", None, "us-east-1") == s3_rest.Target(
        "https://s3.us-east-1.amazonaws.com", "/Old_Bucket"
    )
    assert s3_rest.target("m", "http://127.0.0.1:9000/s3/", "us-east-1") == s3_rest.Target(
        "http://127.0.0.1:9000", "/s3/m"
    )


REDIRECT = (
    "<Error><Code>PermanentRedirect</Code><Message>The bucket you are attempting to "
    "access must be addressed using the specified endpoint.</Message></Error>"
)
MALFORMED = (
    "<Error><Code>AuthorizationHeaderMalformed</Code><Message>The authorization header "
    "is malformed; the region '{got}' is wrong; expecting '{want}'</Message>"
    "<Region>{want}</Region></Error>"
)


class KeepAliveFront(Front):
    """An HTTP/1.1 front for moto (whose server closes every connection): it keeps client
    connections open between requests, as S3 does, forwards each request to moto, and
    `drop()` closes every client connection, as S3 does to idle ones. With `region`, a
    request signed for another one gets S3's (and MinIO's) 400 naming the right region, or
    with `redirect` S3's 301 with the region in x-amz-bucket-region. `whole` drops a
    request's Range, as a proxy that does not know it would."""

    def __init__(self, backend_port: int, region: str = "", redirect: bool = False) -> None:
        self.port, self.region, self.redirect = backend_port, region, redirect
        self.whole = False
        self.sockets: set[socket.socket] = set()
        self.refused = 0
        super().__init__()
        self.url = f"http://{self.host}"

    def answer(self, request: Any) -> Answer:
        self.sockets.add(request.connection)
        signed_for = request.headers.get("Authorization", "").split("/")[2]
        if not self.region or signed_for == self.region:
            headers = {
                name: value
                for name, value in request.headers.items()
                if not (self.whole and name.lower() == "range")
            }
            return forward(self.port, request.path, headers)
        self.refused += 1
        if self.redirect:
            return 301, {"x-amz-bucket-region": self.region}, REDIRECT.encode()
        return 400, {}, MALFORMED.format(got=signed_for, want=self.region).encode()

    def drop(self) -> None:
        for sock in list(self.sockets):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.sockets.clear()

    def close(self) -> None:
        self.drop()
        super().close()


def test_connections_stay_open_and_one_the_server_closed_costs_no_retry(
    s3_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    front = KeepAliveFront(s3_store.emulator.port)
    try:
        s3_store.put("k", b"model")
        rest = s3.backend(s3_store.bucket, front.url)
        assert rest.read("k") == b"model" and rest.read("k") == b"model"
        assert len(front.sockets) == 1  # both on one connection

        front.drop()

        def no_retry(attempt: int) -> None:
            raise AssertionError(f"retry {attempt}: the closed connection was not replaced")

        monkeypatch.setattr(http_client, "backoff", no_retry)
        assert rest.read("k") == b"model"
        assert len(front.sockets) == 1  # on a new connection
    finally:
        front.close()


@pytest.mark.parametrize("redirect", [False, True], ids=["region-error", "redirect"])
def test_a_bucket_in_another_region_is_followed_once(
    s3_store: Store, cache_dir: Path, redirect: bool
) -> None:
    front = KeepAliveFront(s3_store.emulator.port, region="eu-west-1", redirect=redirect)
    try:
        s3_store.put_version("m", 1, 2.0)
        repo = open_repository(f"s3://{front.url.split('//')[1]}/{s3_store.bucket}/m", cache_dir)
        assert sorted(repo.versions()) == [1]
        assert (repo.fetch(1).folder / "model.xml").is_file()
        assert front.refused == 1  # later requests are signed for eu-west-1 from the start
    finally:
        front.close()


def test_a_range_answered_with_the_whole_object_fails_and_writes_no_file(
    s3_store: Store, cache_dir: Path
) -> None:
    front = KeepAliveFront(s3_store.emulator.port)
    front.whole = True
    try:
        s3_store.put("m/1/model.bin", b"\x01" * (download.RANGED_MIN_BYTES + 1))
        s3_store.put("m/1/model.xml", b"<net/>")
        repo = open_repository(f"s3://{front.url.split('//')[1]}/{s3_store.bucket}/m", cache_dir)
        with pytest.raises(
            StorageError,
            match=(
                r"Cannot download s3://.*/m/1/model\.bin.*: bytes \d+-\d+ were answered 200 "
                r"with the whole object; the endpoint, or a proxy before it, ignored the Range "
                r"header$"
            ),
        ):
            repo.fetch(1)
    finally:
        front.close()
    assert not list(cache_dir.rglob("model.bin"))


def test_serving_from_s3_with_env_credentials_never_imports_boto3(s3_store: Store) -> None:
    s3_store.put_version("m", 1, 2.0)
    env = {k: v for k, v in os.environ.items() if k.startswith(("AWS_", "NO_PROXY"))}
    modules = modules_of_a_fetch(s3_store.url("m"), env)
    assert "core.storage.s3.rest" in modules
    assert not {"boto3", "botocore", "s3transfer"} & modules
