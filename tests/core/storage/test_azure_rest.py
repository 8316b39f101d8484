"""The Azure Blob REST client against Azurite, which checks every Shared Key signature: what
it reads, how it pages and names blobs (as the SDK does, so bucket-blob keys agree), its
errors, and which environments pick it over azure-storage-blob."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from core.errors import StorageError
from core.storage import azure, download, http_client, open_repository
from core.storage.azure import rest as azure_rest
from core.storage.azure import sdk as azure_sdk
from tests.core.storage.helpers import (
    AzureStore,
    Store,
    modules_of_a_fetch,
    read_version_1,
    use_env,
)
from tests.emulators import AZURITE_ACCOUNT, AZURITE_KEY, Emulator

ODD_NAMES = ("a b+c%d=e.bin", "é/ü~x.txt", "semi;colon,comma&amp.txt", "q?hash#.bin")
CONN = "AZURE_STORAGE_CONNECTION_STRING"


@pytest.fixture
def az_store(emulators: dict[str, Emulator], monkeypatch: pytest.MonkeyPatch) -> Store:
    use_env(monkeypatch, emulators["az"])
    return AzureStore(emulators["az"]).create()


def _sdk_backend(store: Store, monkeypatch: pytest.MonkeyPatch) -> azure_sdk.AzureBackend:
    with monkeypatch.context() as env:
        env.setenv("OVS_AZURE_CLIENT", "sdk")
        sdk = azure.backend(store.bucket)
    assert isinstance(sdk, azure_sdk.AzureBackend)
    return sdk


def test_signed_reads_of_odd_names_pass_azurite_checks(az_store: Store, cache_dir: Path) -> None:
    files = az_store.put_version("m", 1, 2.0)
    for name in ODD_NAMES:
        az_store.put(f"m/1/{name}", name.encode())
    assert isinstance(azure.backend(az_store.bucket), azure_rest.AzureRestBackend)
    assert read_version_1(az_store, cache_dir) == {**files, **{n: n.encode() for n in ODD_NAMES}}


def test_listing_pages_and_names_match_the_sdk(
    az_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"m/1/part-{i:02d}.bin" for i in range(23)] + [f"m/1/{n}" for n in ODD_NAMES]
    for name in names:
        az_store.put(name, name.encode())
    az_store.put("other/1/x.bin", b"x")
    monkeypatch.setattr(azure_rest, "PAGE_SIZE", 5)  # 6 pages, each after a NextMarker
    rest = azure.backend(az_store.bucket)
    listed = list(rest.list_objects("m/"))
    assert listed == list(_sdk_backend(az_store, monkeypatch).list_objects("m/"))  # tags too
    assert sorted(o.key for o in listed) == sorted(names)


@pytest.mark.parametrize("client", ["auto", "sdk"])
def test_a_wrong_key_is_the_same_access_denied_on_both_clients(
    az_store: Store, cache_dir: Path, monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    az_store.put_version("m", 1, 2.0)
    monkeypatch.setenv(CONN, os.environ[CONN].replace(AZURITE_KEY, "A" * 88))
    monkeypatch.setenv("OVS_AZURE_CLIENT", client)
    with pytest.raises(StorageError) as err:
        open_repository(az_store.url("m"), cache_dir).versions()
    assert str(err.value) == (
        f"Cannot list az://{az_store.bucket}/m/: access denied: Server "
        "failed to authenticate the request. Make sure the value of the "
        "Authorization header is formed correctly including the "
        "signature."
    )


def test_a_missing_container_and_blob_read_as_on_the_sdk_path(
    az_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OVS_AZURE_CLIENT", "auto")
    with pytest.raises(StorageError, match="container 'no-such-container' does not exist"):
        list(azure.backend("no-such-container").list_objects("m/"))
    with pytest.raises(
        StorageError, match=f"Cannot read az://{az_store.bucket}/m/none.json: object not found"
    ):
        azure.backend(az_store.bucket).read("m/none.json")


def test_big_file_downloads_in_ranges_and_a_replaced_one_fails(
    az_store: Store, tmp_path: Path
) -> None:
    data = os.urandom(download.RANGED_MIN_BYTES + download.PART_BYTES // 2 + 3)
    az_store.put("m/1/big.bin", data)
    rest = azure.backend(az_store.bucket)
    [obj] = rest.list_objects("m/1/big.bin")
    rest.download(obj, tmp_path / "big.bin")
    assert (tmp_path / "big.bin").read_bytes() == data

    az_store.put("m/1/big.bin", data[::-1])  # a new ETag: the listed one no longer matches
    with pytest.raises(
        StorageError,
        match=r"Cannot download az://.*/m/1/big.bin: the object changed .* listed \(412\)",
    ):
        rest.download(obj, tmp_path / "again.bin")


def test_a_sas_in_the_connection_string_reads_the_container(
    az_store: Store, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    files = az_store.put_version("m", 1, 2.0)
    sas = generate_container_sas(
        AZURITE_ACCOUNT,
        az_store.bucket,
        AZURITE_KEY,
        permission=ContainerSasPermissions(read=True, list=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )
    endpoint = f"{az_store.emulator.endpoint}/{AZURITE_ACCOUNT}"
    monkeypatch.setenv(CONN, f"BlobEndpoint={endpoint};SharedAccessSignature={sas}")
    assert azure.backend(az_store.bucket)._account.sas == sas  # type: ignore[attr-defined]
    assert read_version_1(az_store, cache_dir) == files

    denied = sas.replace("sp=rl", "sp=r")  # no list permission: the signature breaks
    monkeypatch.setenv(CONN, f"BlobEndpoint={endpoint};SharedAccessSignature={denied}")
    with pytest.raises(StorageError, match="access denied"):
        open_repository(az_store.url("m"), cache_dir / "again").versions()


@pytest.mark.parametrize(
    ("conn", "url", "expected"),
    [
        (
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.chinacloudapi.cn",
            None,
            azure_rest.Account("https://acct.blob.core.chinacloudapi.cn", "acct", "a2V5"),
        ),
        (
            "AccountName=acct;AccountKey=a2V5",
            None,
            azure_rest.Account("https://acct.blob.core.windows.net", "acct", "a2V5"),
        ),
        (
            "BlobEndpoint=http://10.0.0.1:10000/acct/;SharedAccessSignature=?sv=1&sig=x",
            None,
            azure_rest.Account("http://10.0.0.1:10000/acct", sas="sv=1&sig=x"),
        ),
        (
            "UseDevelopmentStorage=true",
            None,
            azure_rest.Account(
                "http://127.0.0.1:10000/devstoreaccount1", "devstoreaccount1", azure_rest.DEV_KEY
            ),
        ),
        (
            "BlobEndpoint=https://public.example.net",
            None,
            azure_rest.Account("https://public.example.net"),
        ),
        (
            None,
            "https://acct.blob.core.windows.net/?sv=1&sig=x",
            azure_rest.Account("https://acct.blob.core.windows.net", sas="sv=1&sig=x"),
        ),
        (None, "https://acct.blob.core.windows.net", None),  # a managed identity: the SDK
        (None, None, None),
    ],
    ids=["suffix", "name-and-key", "sas", "dev", "anonymous", "sas-url", "identity", "none"],
)
def test_which_account_the_rest_client_takes(
    monkeypatch: pytest.MonkeyPatch,
    conn: str | None,
    url: str | None,
    expected: azure_rest.Account | None,
) -> None:
    for name in ("OVS_AZURE_CLIENT", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert azure.choose(conn, url) == expected


def test_the_sdk_takes_proxies_and_the_explicit_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = "AccountName=acct;AccountKey=a2V5"
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "localhost")
    assert azure.choose(conn, None) is None
    monkeypatch.setenv("NO_PROXY", "localhost,.core.windows.net")
    assert azure.choose(conn, None) is not None
    monkeypatch.setenv("OVS_AZURE_CLIENT", "sdk")
    assert azure.choose(conn, None) is None
    monkeypatch.setenv("OVS_AZURE_CLIENT", "rest")
    assert azure.choose(conn, None) is not None
    monkeypatch.setenv("NO_PROXY", "localhost")
    with pytest.raises(
        StorageError,
        match=r"^OVS_AZURE_CLIENT=rest, but the REST client cannot "
        r"serve this set-up: a proxy",
    ):
        azure.choose(conn, None)
    monkeypatch.setenv("OVS_AZURE_CLIENT", "shared-key")
    with pytest.raises(
        StorageError, match="OVS_AZURE_CLIENT must be auto, sdk or rest, not 'shared-key'"
    ):
        azure.choose(conn, None)


@pytest.mark.parametrize("client", ["auto", "sdk"])
def test_a_malformed_connection_string_is_the_same_error_on_both_clients(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    monkeypatch.setenv(CONN, "AccountName=acct;AccountKey")
    monkeypatch.setenv("OVS_AZURE_CLIENT", client)
    with pytest.raises(
        StorageError,
        match="^Invalid AZURE_STORAGE_CONNECTION_STRING: Connection "
        "string is either blank or malformed.",
    ):
        open_repository("az://c/m", cache_dir).versions()


def test_serving_from_a_connection_string_never_imports_the_sdk(az_store: Store) -> None:
    az_store.put_version("m", 1, 2.0)
    env = {CONN: os.environ[CONN], "NO_PROXY": "127.0.0.1"}
    modules = modules_of_a_fetch(az_store.url("m"), env)
    assert "core.storage.azure.rest" in modules
    assert not {m for m in modules if m.startswith("azure.")}


def test_a_name_azure_sends_percent_encoded_is_decoded() -> None:
    # Azure's form for a name XML 1.0 cannot hold (Azurite answers 500 for such names)
    body = (
        b'<EnumerationResults><Blobs><Blob><Name Encoded="true">m/ctl%01x.bin</Name>'
        b"<Properties><Content-Length>1</Content-Length><Etag>0x1</Etag></Properties>"
        b"</Blob></Blobs></EnumerationResults>"
    )
    [blob] = http_client.parse_xml(body).iter("Blob")
    assert azure_rest._name(blob) == "m/ctl\x01x.bin"
