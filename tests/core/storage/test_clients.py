"""One knob per provider, OVS_<P>_CLIENT=auto|sdk|rest (core.storage.clients): sdk always takes
the SDK, rest always the REST client and refuses, saying why, a set-up that client cannot serve
(never a silent switch to the SDK); `boto3`, OVS_S3_CLIENT's value before `sdk`, still works.
Also: a bucket repository renews its client in place (snapshot restore), and versions fetched
before read through the new one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from core import storage
from core.errors import StorageError
from core.storage import azure, clients, open_repository, s3
from core.storage.azure.rest import AzureRestBackend
from core.storage.azure.sdk import AzureBackend
from core.storage.backend import RemoteObject
from core.storage.bucket import BucketRepository
from core.storage.gcs.rest import GcsRestBackend
from core.storage.gcs.sdk import GcsBackend
from core.storage.s3.rest import S3RestBackend
from core.storage.s3.sdk import S3Backend
from tests.core.storage.helpers import _FOREIGN_ENV

AWS = {
    "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "secret-example",
    "AWS_REGION": "eu-west-1",
}
AZURE = {"AZURE_STORAGE_CONNECTION_STRING": "AccountName=acct;AccountKey=a2V5"}
GOOGLE = {"STORAGE_EMULATOR_HOST": "127.0.0.1:9"}
PROXIES = (
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
)


@pytest.fixture(autouse=True)
def bare_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in (
        *_FOREIGN_ENV,
        *PROXIES,
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_USE_FIPS_ENDPOINT",
        "AWS_USE_DUALSTACK_ENDPOINT",
        "GCE_METADATA_ROOT",
        "GCE_METADATA_MTLS_MODE",
        "GOOGLE_CLOUD_UNIVERSE_DOMAIN",
        "AZURE_STORAGE_ACCOUNT",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))  # no ADC file


def _set(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize(
    ("value", "mode"),
    [
        (None, "auto"),
        ("", "auto"),
        ("auto", "auto"),
        ("sdk", "sdk"),
        ("rest", "rest"),
        (" REST\n", "rest"),
        ("Sdk", "sdk"),
    ],
)
def test_the_modes(monkeypatch: pytest.MonkeyPatch, value: str | None, mode: str) -> None:
    if value is not None:
        monkeypatch.setenv("OVS_GCS_CLIENT", value)
    assert clients.mode("OVS_GCS_CLIENT") == mode


def test_boto3_is_sdk_for_s3_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OVS_S3_CLIENT", "boto3")
    assert clients.mode("OVS_S3_CLIENT", clients.ALIASES) == "sdk"
    _set(monkeypatch, AWS)
    assert isinstance(s3.backend("b", None), S3Backend)
    monkeypatch.setenv("OVS_AZURE_CLIENT", "boto3")
    with pytest.raises(
        StorageError, match="^OVS_AZURE_CLIENT must be auto, sdk or rest, not 'boto3'$"
    ):
        azure.choose(AZURE["AZURE_STORAGE_CONNECTION_STRING"], None)


@pytest.mark.parametrize(
    ("provider", "env", "rest", "sdk"),
    [
        ("s3", AWS, S3RestBackend, S3Backend),
        ("gs", GOOGLE, GcsRestBackend, GcsBackend),
        ("az", AZURE, AzureRestBackend, AzureBackend),
    ],
)
def test_each_mode_picks_its_client(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    provider: str,
    env: dict[str, str],
    rest: type,
    sdk: type,
) -> None:
    _set(monkeypatch, env)
    variable = {"s3": "OVS_S3_CLIENT", "gs": "OVS_GCS_CLIENT", "az": "OVS_AZURE_CLIENT"}
    for mode, expected in (("auto", rest), ("rest", rest), ("sdk", sdk)):
        monkeypatch.setenv(variable[provider], mode)
        repository = open_repository(f"{provider}://bucket/m", tmp_path)
        assert isinstance(repository, BucketRepository)
        assert isinstance(repository.backend, expected), mode


@pytest.mark.parametrize(
    ("url", "variable", "env", "reason"),
    [
        (
            "s3://b/m",
            "OVS_S3_CLIENT",
            {},
            "it signs with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY from the environment",
        ),
        ("s3://b/m", "OVS_S3_CLIENT", {**AWS, "AWS_REGION": ""}, "it needs the bucket's region"),
        ("s3://b/m", "OVS_S3_CLIENT", {**AWS, "AWS_PROFILE": "dev"}, "AWS_PROFILE is set"),
        ("s3://b/m", "OVS_S3_CLIENT", {**AWS, "AWS_USE_FIPS_ENDPOINT": "true"}, "FIPS"),
        ("s3://b/m", "OVS_S3_CLIENT", {**AWS, "HTTPS_PROXY": "http://proxy:3128"}, "a proxy"),
        ("gs://b/m", "OVS_GCS_CLIENT", {}, "it reads the emulator"),
        (
            "gs://b/m",
            "OVS_GCS_CLIENT",
            {"K_SERVICE": "svc", "NO_GCE_CHECK": "true"},
            "NO_GCE_CHECK=true",
        ),
        (
            "az://c/m",
            "OVS_AZURE_CLIENT",
            {"AZURE_STORAGE_ACCOUNT_NAME": "acct"},
            "a managed identity is read by the SDK only",
        ),
        ("az://c/m", "OVS_AZURE_CLIENT", {**AZURE, "HTTPS_PROXY": "http://proxy:3128"}, "a proxy"),
    ],
    ids=[
        "s3-no-keys",
        "s3-no-region",
        "s3-profile",
        "s3-fips",
        "s3-proxy",
        "gs-elsewhere",
        "gs-no-gce-check",
        "az-identity",
        "az-proxy",
    ],
)
def test_rest_refuses_what_it_cannot_serve_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    url: str,
    variable: str,
    env: dict[str, str],
    reason: str,
) -> None:
    _set(monkeypatch, env)
    monkeypatch.setenv(variable, "auto")
    assert not isinstance(
        open_repository(url, tmp_path).backend,  # type: ignore[attr-defined]
        (S3RestBackend, GcsRestBackend, AzureRestBackend),
    )
    monkeypatch.setenv(variable, "rest")
    with pytest.raises(StorageError) as err:
        open_repository(url, tmp_path)
    assert err.value.message.startswith(
        f"{variable}=rest, but the REST client cannot serve this set-up: "
    )
    assert reason in err.value.message
    assert err.value.message.endswith(f"; set {variable}=auto or sdk to read it through the SDK")
    with pytest.raises(StorageError, match=f"^{variable}=rest, but"):
        storage.read_file(f"{url}/config.json")


def test_an_unreadable_client_setting_fails_the_model_not_the_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from core.config import Settings
    from core.serving.registry import ModelManager

    monkeypatch.setenv("OVS_S3_CLIENT", "rest")  # and no credentials in the environment
    manager = ModelManager.start(
        Settings(model_name="m", model_path="s3://b/m", cache_dir=str(tmp_path))
    )
    assert "OVS_S3_CLIENT=rest, but the REST client" in manager.models["m"].error


class _Backend:
    scheme = "s3"
    bucket = "b"

    def __init__(self, name: str, data: dict[str, bytes]) -> None:
        self.name, self.data, self.downloads = name, data, 0

    def list_objects(self, prefix: str) -> Iterator[RemoteObject]:
        for key, value in self.data.items():
            if key.startswith(prefix):
                yield RemoteObject(key, len(value), f"{self.name}-{key}")

    def download(self, obj: RemoteObject, dest: Path) -> None:
        self.downloads += 1
        dest.write_bytes(self.data[obj.key])

    def read(self, key: str) -> bytes:
        return self.data[key]


def test_renew_client_swaps_the_backend_and_fetched_versions_follow(tmp_path: Path) -> None:
    data = {"m/1/model.xml": b"<net/>", "m/1/.ov-compiled/k.blob": b"blob"}
    old, new = _Backend("old", data), _Backend("new", data)
    made = iter([new])
    repository = BucketRepository("s3://b/m", old, "m", tmp_path, connect=lambda: next(made))
    files = repository.fetch(1)
    assert (files.folder / "model.xml").read_bytes() == b"<net/>" and old.downloads == 1
    storage.renew_client(repository)
    assert repository.backend is new
    assert files.blob("k.blob") == files.folder / ".ov-compiled" / "k.blob"
    assert (old.downloads, new.downloads) == (1, 1)  # the blob came through the new client
    assert files.blob("other.blob") is None  # not listed: nothing asked of the bucket
    storage.renew_client(open_repository(str(tmp_path), tmp_path))  # local: nothing to renew
    repository.release(files)
    assert not files.folder.exists()
