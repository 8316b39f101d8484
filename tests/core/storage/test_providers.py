"""Provider-specific ways in: OVMS's S3 endpoint forms, unsigned S3, an Azure SAS URL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from core.errors import StorageError
from core.storage import open_repository
from tests.core.storage.helpers import Store, use_env
from tests.emulators import AZURITE_ACCOUNT, AZURITE_KEY, Emulator


@pytest.fixture
def s3_store(emulators: dict[str, Emulator], monkeypatch: pytest.MonkeyPatch) -> Store:
    from tests.core.storage.helpers import S3Store

    use_env(monkeypatch, emulators["s3"])
    store = S3Store(emulators["s3"]).create()
    store.put_version("m", 1, 2.0)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    return store


def test_s3_endpoint_env_as_ovms(
    s3_store: Store, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("S3_ENDPOINT", s3_store.emulator.endpoint.removeprefix("http://"))
    assert sorted(open_repository(s3_store.url("m"), cache_dir).versions()) == [1]


def test_s3_host_port_in_the_url(s3_store: Store, cache_dir: Path) -> None:
    url = f"s3://127.0.0.1:{s3_store.emulator.port}/{s3_store.bucket}/m"
    assert (open_repository(url, cache_dir).fetch(1).folder / "model.xml").is_file()


def test_s3_without_credentials_goes_unsigned(
    s3_store: Store, cache_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_store.emulator.endpoint)
    from botocore import UNSIGNED

    from core.storage.s3.sdk import make_client

    assert make_client(None).meta.config.signature_version is UNSIGNED
    assert sorted(open_repository(s3_store.url("m"), cache_dir).versions()) == [1]


def test_azure_account_url_with_sas(
    emulators: dict[str, Emulator], cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas

    from tests.core.storage.helpers import AzureStore

    use_env(monkeypatch, emulators["az"])
    store = AzureStore(emulators["az"]).create()
    store.put_version("m", 4, 1.0)
    sas = generate_account_sas(
        AZURITE_ACCOUNT,
        AZURITE_KEY,
        ResourceTypes(container=True, object=True),
        AccountSasPermissions(read=True, list=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING")
    monkeypatch.setenv(
        "AZURE_STORAGE_ACCOUNT_URL", f"{emulators['az'].endpoint}/{AZURITE_ACCOUNT}?{sas}"
    )
    assert (open_repository(store.url("m"), cache_dir).fetch(4).folder / "model.bin").is_file()


def test_azure_without_any_account(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_STORAGE_ACCOUNT_URL",
        "AZURE_STORAGE_ACCOUNT_NAME",
        "AZURE_STORAGE_ACCOUNT",
    ):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(StorageError, match="AZURE_STORAGE_CONNECTION_STRING"):
        open_repository("az://c/m", cache_dir).versions()


def test_azure_access_denied_with_a_wrong_key(
    emulators: dict[str, Emulator], cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.core.storage.helpers import AzureStore

    use_env(monkeypatch, emulators["az"])
    store = AzureStore(emulators["az"]).create()
    store.put_version("m", 1, 1.0)
    wrong = emulators["az"].env["AZURE_STORAGE_CONNECTION_STRING"].replace(AZURITE_KEY, "A" * 88)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", wrong)
    with pytest.raises(StorageError, match=f"{store.bucket}.*access denied"):
        open_repository(store.url("m"), cache_dir).versions()
