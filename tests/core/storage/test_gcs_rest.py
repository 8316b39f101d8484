"""The Cloud Storage REST client (core.storage.gcs_rest) against gcp-storage-emulator: listings
identical to google-cloud-storage's, ranged downloads, the metadata server's token as Cloud
Run gives it (a local metadata server that google-auth itself accepts), and the rule that
picks it over the SDK."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest

from core.errors import StorageError
from core.storage import download, gcs, http_client, open_repository
from core.storage.gcs import rest as gcs_rest
from core.storage.gcs import sdk as gcs_sdk
from tests.core.storage.helpers import (
    _FOREIGN_ENV,
    Answer,
    Front,
    GcsStore,
    Store,
    forward,
    modules_of_a_fetch,
    read_version_1,
    use_env,
)
from tests.emulators import Emulator, free_port

ODD_NAMES = ("a b+c%d=e.bin", "é/ü~x.txt", "semi;colon,comma&amp#hash?q.txt")
FLAVOR = {"Metadata-Flavor": "Google"}


@pytest.fixture
def gs_store(emulators: dict[str, Emulator], monkeypatch: pytest.MonkeyPatch) -> Store:
    use_env(monkeypatch, emulators["gs"])
    monkeypatch.setattr(gcs_rest.Token, "_all", {})
    return GcsStore(emulators["gs"]).create()


def _sdk_backend(store: Store, monkeypatch: pytest.MonkeyPatch) -> gcs_sdk.GcsBackend:
    with monkeypatch.context() as env:
        env.setenv("OVS_GCS_CLIENT", "sdk")
        sdk = gcs.backend(store.bucket)
    assert isinstance(sdk, gcs_sdk.GcsBackend)
    return sdk


class Metadata(Front):
    """A metadata server as Cloud Run's answers google-auth: its probe, the project, the
    service account, and an access token (a new one each time, `tok-N`, valid until
    `valid` is cleared); like the real one it refuses a request without
    `Metadata-Flavor: Google`."""

    def __init__(self, expires_in: int = 3599) -> None:
        super().__init__()
        self.expires_in = expires_in
        self.issued = 0
        self.valid: set[str] = set()

    def answer(self, request: Any) -> Answer:
        if request.headers.get("Metadata-Flavor") != "Google":
            return 403, FLAVOR, b"Missing Metadata-Flavor:Google header."
        path = request.path.split("?")[0].removeprefix("/computeMetadata/v1/")
        if path.startswith("instance/service-accounts/") and path.endswith("/token"):
            self.issued += 1
            self.valid.add(f"tok-{self.issued}")
            body: Any = {
                "access_token": f"tok-{self.issued}",
                "expires_in": self.expires_in,
                "token_type": "Bearer",
            }
        elif path.startswith("instance/service-accounts/") and path.endswith("/"):
            body = {
                "aliases": ["default"],
                "email": "run@ovs-test.iam.gserviceaccount.com",
                "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
            }
        elif path in ("project/project-id", "universe/universe-domain"):
            return (
                200,
                {**FLAVOR, "Content-Type": "text/plain"},
                (b"ovs-test" if path.startswith("project") else b"googleapis.com"),
            )
        elif path in ("", "/"):
            return 200, FLAVOR, b""
        else:
            return 404, FLAVOR, b"not found"
        return 200, {**FLAVOR, "Content-Type": "application/json"}, json.dumps(body).encode()


class BearerFront(Front):
    """Cloud Storage's door in front of the emulator: a request must carry a valid token of
    the metadata server's, else Cloud Storage's 401 answer; the rest goes to the emulator.
    Listings come in pages of maxResults with a nextPageToken, as Cloud Storage sends them
    (the emulator sends one page). `whole` answers a Range with the whole object, as Cloud
    Storage does for an object it decompresses on the way (stored gzip-encoded)."""

    def __init__(self, emulator_port: int, metadata: Metadata) -> None:
        super().__init__()
        self.port, self.metadata = emulator_port, metadata
        self.seen: list[tuple[str, str]] = []  # (Authorization, path)
        self.whole = False

    def answer(self, request: Any) -> Answer:
        auth = request.headers.get("Authorization", "")
        self.seen.append((auth, request.path))
        if auth.removeprefix("Bearer ") not in self.metadata.valid:
            error = {
                "error": {
                    "code": 401,
                    "message": "Invalid Credentials",
                    "errors": [{"reason": "authError"}],
                }
            }
            return 401, {"Content-Type": "application/json"}, json.dumps(error).encode()
        dropped = ("authorization", "range") if self.whole else ("authorization",)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in dropped}
        path, _, query = request.path.partition("?")
        if not path.endswith("/o"):
            return forward(self.port, request.path, headers)
        asked = dict(parse_qsl(query))
        start, size = int(asked.pop("pageToken", 0)), int(asked.pop("maxResults", 1000))
        status, kept, body = forward(self.port, f"{path}?{urlencode(asked)}", headers)
        if status != 200:
            return status, kept, body
        listing = json.loads(body)
        items = listing.get("items", [])
        page = {**listing, "items": items[start : start + size]}
        if start + size < len(items):
            page["nextPageToken"] = str(start + size)
        return status, {"Content-Type": "application/json"}, json.dumps(page).encode()


@pytest.fixture
def cloud_run(
    gs_store: Store, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Metadata, BearerFront]]:
    """gs_store as Cloud Run reaches Cloud Storage: no emulator variable, the service
    account's token from the metadata server, checked at the front door."""
    metadata = Metadata()
    front = BearerFront(gs_store.emulator.port, metadata)
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")
    for name, value in {
        "K_SERVICE": "ovs",
        "GCE_METADATA_HOST": metadata.host,
        "GCE_METADATA_IP": metadata.host,
        "API_ENDPOINT_OVERRIDE": f"http://{front.host}",
    }.items():
        monkeypatch.setenv(name, value)
    try:
        yield metadata, front
    finally:
        front.close()
        metadata.close()


def test_odd_names_read_and_list_as_on_the_sdk(
    gs_store: Store, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = gs_store.put_version("m", 1, 2.0)
    for name in ODD_NAMES:
        gs_store.put(f"m/1/{name}", name.encode())
    gs_store.put("other/1/x.bin", b"x")
    rest = gcs.backend(gs_store.bucket)
    assert isinstance(rest, gcs_rest.GcsRestBackend)
    assert list(rest.list_objects("m/")) == list(
        _sdk_backend(gs_store, monkeypatch).list_objects("m/")
    )  # generation tags too
    expected = {**files, **{name: name.encode() for name in ODD_NAMES}}
    assert read_version_1(gs_store, cache_dir) == expected


def test_listing_pages_match_the_sdk(
    gs_store: Store, cloud_run: tuple[Metadata, BearerFront], monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"m/1/part-{i:02d}.bin" for i in range(23)]
    for name in names:
        gs_store.put(name, name.encode())
    gs_store.put("other/1/x.bin", b"x")
    monkeypatch.setattr(gcs_rest, "PAGE_SIZE", 5)
    listed = list(gcs.backend(gs_store.bucket).list_objects("m/"))
    pages = [path for _, path in cloud_run[1].seen if "/o?" in path]
    assert len(pages) == 5 and sum("pageToken=" in path for path in pages) == 4
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gs_store.emulator.endpoint)  # unpaged
    assert listed == list(_sdk_backend(gs_store, monkeypatch).list_objects("m/"))
    assert [obj.key for obj in listed] == names


def test_big_file_downloads_in_ranges_of_the_listed_generation(
    gs_store: Store, cache_dir: Path, cloud_run: tuple[Metadata, BearerFront]
) -> None:
    big = bytes(range(256)) * ((download.RANGED_MIN_BYTES + download.PART_BYTES // 2) // 256)
    gs_store.put("m/1/model.bin", big)
    gs_store.put("m/1/model.xml", b"<net/>")
    folder = open_repository(gs_store.url("m"), cache_dir).fetch(1).folder
    assert (folder / "model.bin").read_bytes() == big
    listed = gcs.backend(gs_store.bucket).list_objects("m/1/model.bin")
    generation = next(iter(listed)).tag.split(":")[0]
    parts = [path for _, path in cloud_run[1].seen if "model.bin" in path and "alt=media" in path]
    assert len(parts) == 3 and all(f"generation={generation}" in path for path in parts)


def test_a_small_file_downloads_the_listed_generation(
    gs_store: Store, cache_dir: Path, cloud_run: tuple[Metadata, BearerFront]
) -> None:
    """A file replaced after its listing is not read (404): no mix of two uploads."""
    gs_store.put("m/1/model.xml", b"<net/>")
    folder = open_repository(gs_store.url("m"), cache_dir).fetch(1).folder
    assert (folder / "model.xml").read_bytes() == b"<net/>"
    listed = gcs.backend(gs_store.bucket).list_objects("m/1/model.xml")
    generation = next(iter(listed)).tag.split(":")[0]
    gets = [path for _, path in cloud_run[1].seen if "model.xml" in path and "alt=media" in path]
    assert len(gets) == 1 and f"generation={generation}" in gets[0], gets


def test_a_range_answered_with_the_whole_object_fails_and_writes_no_file(
    gs_store: Store, cache_dir: Path, cloud_run: tuple[Metadata, BearerFront]
) -> None:
    gs_store.put("m/1/model.bin", b"\x01" * (download.RANGED_MIN_BYTES + 1))
    gs_store.put("m/1/model.xml", b"<net/>")
    cloud_run[1].whole = True
    with pytest.raises(
        StorageError,
        match=(
            r"Cannot download gs://.*/m/1/model\.bin: bytes \d+-\d+ were answered 200 with "
            r"the whole object, as Cloud Storage answers for one stored with Content-Encoding: "
            r"gzip; store model files without it"
        ),
    ):
        open_repository(gs_store.url("m"), cache_dir).fetch(1)
    assert not list(cache_dir.rglob("model.bin"))


def test_cloud_run_reads_with_the_metadata_token_and_imports_no_sdk(
    gs_store: Store, cloud_run: tuple[Metadata, BearerFront], monkeypatch: pytest.MonkeyPatch
) -> None:
    metadata, front = cloud_run
    gs_store.put_version("m", 1, 2.0)
    env = dict(os.environ)
    modules = modules_of_a_fetch(gs_store.url("m"), env)
    sdk = ("google.auth", "google.api_core", "google.cloud.storage", "requests")
    assert not {m for m in modules if m.startswith(sdk)}
    assert metadata.issued == 1 and front.seen
    assert all(auth == "Bearer tok-1" for auth, _ in front.seen)

    front.seen.clear()  # the SDK reads through the same doors: they are as google-auth expects
    modules_of_a_fetch(gs_store.url("m"), {**env, "OVS_GCS_CLIENT": "sdk"})
    assert front.seen and all(
        auth.startswith("Bearer tok-") and auth != "Bearer tok-1" for auth, _ in front.seen
    )


def test_one_token_serves_every_model_until_it_nears_expiry(
    gs_store: Store, cache_dir: Path, cloud_run: tuple[Metadata, BearerFront]
) -> None:
    metadata, _ = cloud_run
    for name in ("a", "b"):
        gs_store.put_version(name, 1, 2.0)
        open_repository(gs_store.url(name), cache_dir / name).fetch(1)
    assert metadata.issued == 1

    metadata.expires_in = gcs_rest.REFRESH_S  # due for renewal as soon as it arrives
    gcs_rest.Token._all.clear()
    backend = gcs.backend(gs_store.bucket)
    backend.read("a/1/model.xml")
    backend.read("a/1/model.xml")
    assert metadata.issued == 3


def test_a_revoked_token_is_renewed_once_and_a_refused_one_is_access_denied(
    gs_store: Store, cloud_run: tuple[Metadata, BearerFront], monkeypatch: pytest.MonkeyPatch
) -> None:
    metadata, front = cloud_run
    gs_store.put("k", b"model")
    backend = gcs.backend(gs_store.bucket)
    assert backend.read("k") == b"model"
    metadata.valid.clear()  # tok-1 is revoked
    assert backend.read("k") == b"model"
    assert [auth for auth, _ in front.seen[-2:]] == ["Bearer tok-1", "Bearer tok-2"]

    monkeypatch.setattr(
        BearerFront,
        "answer",
        lambda self, request: (
            401,
            {},
            b'{"error": {"code": 401, "message": "Invalid Credentials"}}',
        ),
    )
    with pytest.raises(StorageError) as info:
        backend.read("k")
    assert str(info.value) == (
        f"Cannot read gs://{gs_store.bucket}/k: access denied: GET "
        f"http://{front.host}/download/storage/v1/b/{gs_store.bucket}"
        f"/o/k?<redacted>: Invalid Credentials"
    )  # query strings
    # never leave an error: a signed URL's carries its signature


def test_an_unreachable_metadata_server_is_a_credentials_error(
    gs_store: Store, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")
    monkeypatch.setenv("K_SERVICE", "ovs")
    monkeypatch.setenv("GCE_METADATA_HOST", f"127.0.0.1:{free_port()}")
    monkeypatch.setattr(http_client, "backoff", lambda attempt: None)
    with pytest.raises(
        StorageError,
        match=r"Cannot list gs://.*/m/: credentials: the metadata "
        r"server http://127\.0\.0\.1:\d+ cannot be reached",
    ):
        open_repository(gs_store.url("m"), cache_dir).versions()


def test_a_missing_bucket_and_object_read_as_on_the_sdk_path(
    gs_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    def texts(present: Any, gone: Any) -> list[str]:
        errors = []
        for call in (lambda: list(gone.list_objects("m/")), lambda: present.read("m/x")):
            with pytest.raises(StorageError) as info:
                call()
            errors.append(str(info.value).replace(gs_store.bucket, "B"))
        return errors

    sdk = _sdk_backend(gs_store, monkeypatch)
    missing = f"gone-{gs_store.bucket}"
    rest_texts = texts(gcs.backend(gs_store.bucket), gcs.backend(missing))
    assert rest_texts == texts(sdk, gcs_sdk.GcsBackend(missing))
    assert rest_texts == [
        "Cannot list gs://gone-B/m/: bucket 'gone-B' does not exist",
        "Cannot read gs://B/m/x: object not found",
    ]


@pytest.mark.parametrize(
    ("env", "chosen"),
    [
        ({"STORAGE_EMULATOR_HOST": "127.0.0.1:9023"}, gcs_rest.Where("http://127.0.0.1:9023")),
        ({"K_SERVICE": "svc"}, gcs_rest.Where(gcs_rest.API, gcs_rest.METADATA_HOST)),
        (
            {"CLOUD_RUN_JOB": "job", "API_ENDPOINT_OVERRIDE": "https://gcs.example/"},
            gcs_rest.Where("https://gcs.example", gcs_rest.METADATA_HOST),
        ),
        (
            {"FUNCTION_TARGET": "predict", "GCE_METADATA_HOST": "10.0.0.1:8080"},
            gcs_rest.Where(gcs_rest.API, "10.0.0.1:8080"),
        ),
        ({"K_SERVICE": "svc", "GOOGLE_APPLICATION_CREDENTIALS": "/key.json"}, None),
        ({"K_SERVICE": "svc", "GCE_METADATA_MTLS_MODE": "strict"}, None),
        ({"K_SERVICE": "svc", "NO_GCE_CHECK": "true"}, None),
        ({"K_SERVICE": "svc", "GOOGLE_API_USE_CLIENT_CERTIFICATE": "true"}, None),
        ({"K_SERVICE": "svc", "CLOUDSDK_CONTEXT_AWARE_USE_CLIENT_CERTIFICATE": "True"}, None),
        ({"K_SERVICE": "svc", "GOOGLE_API_CERTIFICATE_CONFIG": "/certs/config.json"}, None),
        (
            {
                "K_SERVICE": "svc",
                "GOOGLE_API_USE_CLIENT_CERTIFICATE": "false",
                "GOOGLE_API_CERTIFICATE_CONFIG": "/certs/config.json",
            },
            gcs_rest.Where(gcs_rest.API, gcs_rest.METADATA_HOST),
        ),
        ({"K_SERVICE": "svc", "GOOGLE_CLOUD_UNIVERSE_DOMAIN": "example.goog"}, None),
        ({"K_SERVICE": "svc", "HTTPS_PROXY": "http://proxy:3128"}, None),
        ({"K_SERVICE": "svc", "OVS_GCS_CLIENT": "sdk"}, None),
        ({"STORAGE_EMULATOR_HOST": "http://127.0.0.1:9023", "OVS_GCS_CLIENT": "sdk"}, None),
        (
            {"STORAGE_EMULATOR_HOST": "http://127.0.0.1:9023", "OVS_GCS_CLIENT": "rest"},
            gcs_rest.Where("http://127.0.0.1:9023"),
        ),
        ({}, None),  # elsewhere, the SDK finds ADC or falls back to anonymous access
    ],
    ids=[
        "emulator",
        "cloud-run",
        "job-override",
        "function-metadata-host",
        "key-file",
        "metadata-mtls",
        "no-gce-check",
        "client-cert",
        "gcloud-client-cert",
        "cert-config",
        "client-cert-off",
        "universe",
        "proxy",
        "sdk",
        "emulator-sdk",
        "emulator-rest",
        "elsewhere",
    ],
)
def test_which_client_reads_the_bucket(
    env: dict[str, str],
    chosen: gcs_rest.Where | None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    _no_google_settings(monkeypatch, tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert gcs.choose() == chosen


def test_files_of_gcloud_and_gke_and_an_unknown_setting_are_not_the_rest_clients(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _no_google_settings(monkeypatch, tmp_path)
    monkeypatch.setenv("K_SERVICE", "svc")
    assert gcs.choose() is not None
    for found in (
        "application_default_credentials.json",
        "certificate_config.json",
        "bundle.pem",
    ):  # ADC, a workload certificate config, GKE's certificates
        (tmp_path / found).write_text("{}")
        assert gcs.choose() is None, found
        (tmp_path / found).unlink()
    monkeypatch.setenv("OVS_GCS_CLIENT", "rest")
    assert gcs.choose() is not None
    (tmp_path / "application_default_credentials.json").write_text("{}")
    with pytest.raises(
        StorageError,
        match=r"^OVS_GCS_CLIENT=rest, but the REST client cannot "
        r"serve this set-up: a key file",
    ):
        gcs.choose()
    monkeypatch.setenv("OVS_GCS_CLIENT", "boto3")
    with pytest.raises(StorageError, match="OVS_GCS_CLIENT must be auto, sdk or rest, not 'boto3'"):
        gcs.choose()


def _no_google_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No variable choose() reads, an empty gcloud config in tmp_path, and GKE's certificate
    bundle looked for at tmp_path/bundle.pem."""
    for name in (
        *_FOREIGN_ENV,
        "GCE_METADATA_ROOT",
        "GCE_METADATA_MTLS_MODE",
        "NO_PROXY",
        "no_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
        "GOOGLE_CLOUD_UNIVERSE_DOMAIN",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    monkeypatch.setattr(gcs_rest, "GKE_CERT_BUNDLE", str(tmp_path / "bundle.pem"))
