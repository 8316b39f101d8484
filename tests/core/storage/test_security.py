"""Storage security: a bucket URL cannot write outside the cache dir, a local repository's
symlinks cannot lead a load out of its base path, and no credential ever shows in an error, a
response or a log line, on every cloud and both client paths (REST and SDK)."""

from __future__ import annotations

import base64
import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core import logs
from core.config import Settings
from core.errors import ConfigError, ServingError, StorageError
from core.storage import open_repository, read_file
from core.storage.backend import RemoteObject
from core.storage.bucket import BucketRepository
from demo import models
from tests.core.storage.helpers import STORES, Store, use_env
from tests.core.storage.hostile import Echo
from tests.core.storage.serving import call, predict, put_scaler, scaled, start_app, states
from tests.emulators import AZURITE_ACCOUNT

# --- a bucket URL that climbs out of the cache dir ----------------------------------------

CLIMB = "../../../../outside/X"  # from <cache>/models/<scheme>/<bucket>: <tmp>/outside/X


def _two_models(tmp_path: Path, store: Store, bad_url: str) -> Path:
    put_scaler(store, "good", 1)
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "model_config_list": [
                    {"config": {"name": "good", "base_path": store.url("good")}},
                    {"config": {"name": "bad", "base_path": bad_url}},
                ]
            }
        )
    )
    return config


def test_a_bucket_url_that_climbs_out_is_refused_and_writes_nothing_outside(
    store: Store, tmp_path: Path
) -> None:
    if store.scheme == "s3":  # the Azure SDK folds '..' in a blob URL, and the GCS emulator
        put_scaler(store, CLIMB, 1)  # refuses such a name: no such object to seed there
    config = _two_models(tmp_path, store, store.url(CLIMB))
    app = start_app(Settings(config_path=str(config), cache_dir=str(tmp_path / "cache")))

    status, error = predict(app, "bad")
    assert status == 404 and "Invalid bucket URL" in error and "'..'" in error, error
    assert predict(app, "good") == (200, scaled(1))
    assert not (tmp_path / "outside").exists()
    assert not [p for p in tmp_path.rglob("*") if "outside" in p.parts]


@pytest.mark.parametrize(
    "url",
    [
        "s3://bucket/a/../b",
        "s3://127.0.0.1:9000/bucket/../x",
        "s3://../x",
        "gs://bucket/a//b",
        "gs://bucket/./a",
        "az://container/a\\b",
        "azure://container/..",
        "gs://bucket/a\0b",
        "s3://bucket/a/..\\..\\b",
    ],
)
def test_every_unsafe_bucket_url_is_a_config_error(url: str, tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError,
        match=r"Invalid bucket URL .*: (the path segment '\.\.?'|"
        r"an empty path segment|a backslash|a NUL character)",
    ):
        open_repository(url, tmp_path)
    with pytest.raises(ConfigError, match="Invalid bucket URL"):
        read_file(f"{url}/config.json")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    "url",
    [
        "s3://AKIAUSER:{pw}@bucket/m",
        "s3://AKIAUSER:{pw}@127.0.0.1:9/bucket/m",
        "gs://user:{pw}@bucket/m",
        "az://account:{pw}@container/m",
    ],
)
def test_credentials_in_a_bucket_url_are_refused_and_never_shown(
    url: str, tmp_path: Path, log_lines: list[str]
) -> None:
    """user:password@ in a bucket URL is no way to give credentials here (nor in OVMS): a
    config error saying so, whose text (client answers, logs) never holds the password."""
    password = "PwInTheUrl-1234"
    url = url.format(pw=password)
    with pytest.raises(ConfigError, match="credentials") as info:
        open_repository(url, tmp_path / "cache")
    with pytest.raises(ConfigError, match="credentials"):
        read_file(f"{url}/config.json")
    app = start_app(Settings(model_name="m", model_path=url, cache_dir=str(tmp_path / "cache")))
    status, error = predict(app, "m")
    assert status == 404 and "credentials" in error, error
    texts = [str(info.value), error, json.dumps(call(app, "GET", "/v1/models/m")), *log_lines]
    assert not [text for text in texts if password in text]
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*"))


def _aim_rest_client(scheme: str, endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The REST client of `scheme` aimed at `endpoint` with a credential it sends on every
    request (SigV4 header, bearer token, SAS); -> the model's URL."""
    host = endpoint.partition("://")[2]
    if scheme == "s3":
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEPLANTED01")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", f"{SECRET}-secret-key")
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        monkeypatch.setenv("S3_ENDPOINT", endpoint)
        return "s3://bucket/m"
    if scheme == "gs":
        monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "p")
        monkeypatch.setenv("K_SERVICE", "svc")  # Cloud Run: the metadata server's token
        monkeypatch.setenv("GCE_METADATA_HOST", host)
        monkeypatch.setenv("API_ENDPOINT_OVERRIDE", endpoint)
        return "gs://bucket/m"
    sas = f"sv=2021-08-06&sig={SECRET}"
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_URL", f"{endpoint}/{AZURITE_ACCOUNT}?{sas}")
    return "az://container/m"


@pytest.mark.parametrize("scheme", ["s3", "gs", "az"])
@pytest.mark.parametrize("odd", ["httpss", "ftp", "s3"])
def test_an_endpoint_neither_http_nor_https_is_refused_not_read_in_clear(
    scheme: str, odd: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A mistyped endpoint scheme ('httpss://') is an error naming it, as boto3 and the SDKs
    refuse it, and no request goes out: the REST clients sent signed requests, tokens and
    SAS over plain HTTP to any scheme but https."""
    use_env(monkeypatch, _NO_EMULATOR)
    echo = Echo(scheme, token=f"{SECRET}-metadata-token")
    try:
        url = _aim_rest_client(scheme, f"{odd}://{echo.host}", monkeypatch)
        with pytest.raises(StorageError) as info:
            open_repository(url, tmp_path / "cache").versions()
    finally:
        echo.close()
    assert f"scheme {odd!r}" in info.value.message, info.value.message
    assert not [r for r in echo.requests if not r.startswith("GET /computeMetadata/")]
    assert SECRET not in info.value.message


class _NoEmulator:
    env: dict[str, str] = {}


_NO_EMULATOR: Any = _NoEmulator()


class _NoBackend:
    scheme, bucket = "s3", "bucket"

    def list_objects(self, prefix: str) -> Iterator[RemoteObject]:
        yield from ()

    def download(self, obj: RemoteObject, dest: Path) -> None:
        raise AssertionError("no download")

    def read(self, key: str) -> bytes:
        raise AssertionError("no read")


def test_a_cache_path_that_resolves_outside_the_cache_dir_is_refused(tmp_path: Path) -> None:
    cache, elsewhere = tmp_path / "cache", tmp_path / "elsewhere"
    cache.mkdir()
    elsewhere.mkdir()
    (cache / "s3").symlink_to(elsewhere)  # planted in the cache volume
    with pytest.raises(StorageError, match="resolves outside the cache dir"):
        BucketRepository("s3://bucket/m", _NoBackend(), "m", cache)
    assert isinstance(
        BucketRepository("s3://bucket/m", _NoBackend(), "m", cache / "x"), BucketRepository
    )


# --- local repositories: symlinks that lead out of the base path ----------------------------


def test_local_symlinks_out_of_the_base_path_fail_their_version_only(tmp_path: Path) -> None:
    secret = tmp_path / "system"
    models.save(models.scaler(9.0), secret)
    repo = tmp_path / "repo" / "scaler"
    models.save(models.scaler(1.0), repo / "1")
    (repo / "2").symlink_to(secret, target_is_directory=True)  # a version folder leads out
    (repo / "3").mkdir()
    (repo / "3" / "model.xml").symlink_to(secret / "model.xml")  # a file leads out
    (repo / "3" / "model.bin").symlink_to(secret / "model.bin")
    models.save(models.scaler(4.0), repo / "real4")
    (repo / "4").symlink_to("real4", target_is_directory=True)  # stays inside: followed
    app = start_app(
        Settings(
            model_name="scaler",
            model_path=str(repo),
            model_options={"model_version_policy": {"all": {}}},
            cache_dir=str(tmp_path / "cache"),
        )
    )

    found = states(app)
    for version in (2, 3):
        state, message = found[version]
        assert state == "LOADING" and "outside the model's base path" in message, found
        assert str(secret) not in message  # where it leads is not told to clients
    assert predict(app, version=1) == (200, scaled(1))
    assert predict(app, version=4) == (200, scaled(4))
    assert predict(app, version=2)[0] == 404


# --- no credential in any error, response or log line ---------------------------------------

SECRET = f"PLANTEDsecret{uuid.uuid4().hex}"


class _Lines(logging.Handler):
    """Every log record as the server writes it (core.logs' JSON, with any traceback)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logs.JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def log_lines() -> Iterator[list[str]]:
    handler, root, ours = _Lines(), logging.getLogger(), logging.getLogger("ov_serverless")
    levels = root.level, ours.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)  # the server's default level
    ours.setLevel(logging.DEBUG)  # and every line of ours
    try:
        yield handler.lines
    finally:
        root.removeHandler(handler)
        root.setLevel(levels[0])
        ours.setLevel(levels[1])


def _plant(
    store_name: str, echo: Echo, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, azure: str
) -> str:
    """The environment of `store_name`'s client with SECRET in every credential it reads,
    aimed at `echo`; -> the model's URL."""
    store_cls = STORES[store_name]
    for name, value in store_cls.env.items():
        monkeypatch.setenv(name, value)
    scheme = store_cls.scheme
    if scheme == "s3":
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEPLANTED01")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", f"{SECRET}-secret-key")
        monkeypatch.setenv("AWS_SESSION_TOKEN", f"{SECRET}-session-token\n")  # from a file
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        return f"s3://{echo.host}/bucket/m"
    if scheme == "gs":
        monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "p")
        monkeypatch.setenv("API_ENDPOINT_OVERRIDE", echo.url)
        if store_name == "gs":  # Cloud Run: the metadata server's token
            monkeypatch.setenv("K_SERVICE", "svc")
            monkeypatch.setenv("GCE_METADATA_HOST", echo.host)
        key_file = tmp_path / "adc.json"  # with a token still valid: sent as it is
        key_file.write_text(
            json.dumps(
                {
                    "type": "authorized_user",
                    "client_id": "id.apps.googleusercontent.com",
                    "client_secret": f"{SECRET}-client-secret",
                    "refresh_token": f"{SECRET}-refresh",
                    "token": f"{SECRET}-access-token",
                    "expiry": "2099-01-01T00:00:00Z",
                }
            )
        )
        if store_name == "gs-sdk":  # a key file (the REST client is not taken for one)
            monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file))
        return "gs://bucket/m"
    endpoint = f"{echo.url}/{AZURITE_ACCOUNT}"
    if azure == "key":
        key = base64.b64encode(f"{SECRET}-account-key".encode()).decode()
        monkeypatch.setenv(
            "AZURE_STORAGE_CONNECTION_STRING",
            (
                f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={key};"
                f"BlobEndpoint={endpoint};\n"
            ),
        )
    else:  # a SAS URL read from a mounted secret file, newline and all
        monkeypatch.setenv(
            "AZURE_STORAGE_ACCOUNT_URL",
            f"{endpoint}?sv=2025-11-05&sp=rl&sr=c&sig={SECRET}%2Bsas%3D\n",
        )
    return "az://container/m"


def _texts_of(app: Any, exc: BaseException | None) -> list[str]:
    texts = [str(exc)] if exc is not None else []
    for path in ("/v1/models/m", "/v2/models/m", "/v2/models/m/ready"):
        texts.append(json.dumps(call(app, "GET", path)))
    texts.append(json.dumps(predict(app, "m")))
    texts.append(json.dumps(call(app, "POST", "/v1/config/reload")))
    return texts


@pytest.mark.parametrize(
    ("store_name", "azure"),
    [*((name, "key") for name in sorted(STORES)), ("az", "sas"), ("az-sdk", "sas")],
)
def test_a_planted_secret_never_shows_in_errors_responses_or_logs(
    store_name: str,
    azure: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    log_lines: list[str],
    emulators: dict[str, Any],
) -> None:
    scheme = STORES[store_name].scheme
    use_env(monkeypatch, emulators[scheme])  # clears every client variable, then:
    for name in ("AZURE_STORAGE_CONNECTION_STRING", "STORAGE_EMULATOR_HOST", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    echo = Echo(scheme, token=f"{SECRET}-metadata-token")
    try:
        url = _plant(store_name, echo, monkeypatch, tmp_path, azure)
        errors: list[BaseException] = []
        for attempt in (
            lambda: open_repository(url, tmp_path / "cache").versions(),
            lambda: read_file(f"{url}/config.json"),
        ):
            with pytest.raises(ServingError) as info:
                attempt()
            errors.append(info.value)
        app = start_app(Settings(model_name="m", model_path=url, cache_dir=str(tmp_path)))
        texts = [*_texts_of(app, errors[0]), str(errors[1]), *log_lines]
    finally:
        echo.close()
    assert echo.requests, "the client never reached the endpoint: nothing was tested"
    reached = [r for r in echo.requests if SECRET in r]
    assert reached or scheme == "az" and azure == "key", "no secret was sent to be echoed"
    leaks = [text for text in texts if SECRET in text]
    assert not leaks, leaks
    assert any("<redacted>" in text for text in texts) or not reached, texts


def test_the_message_of_every_storage_error_is_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    from core.storage.secrets import StorageError as RedactedError

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", f"{SECRET}key")
    error = RedactedError(
        f"GET https://h/c/b?sv=1&sig=abc%2Bdef {SECRET}key "
        "Authorization: Bearer ya29.tokentoken https://u:pw@host/x"
    )
    assert SECRET not in str(error) and "abc" not in error.message
    assert "ya29" not in error.message and "pw@" not in error.message
    assert error.message == (
        "GET https://h/c/b?<redacted> <redacted> Authorization: Bearer "
        "<redacted> https://<redacted>@host/x"
    )


def test_a_request_that_cannot_be_sent_is_not_retried_and_shows_no_secret(
    monkeypatch: pytest.MonkeyPatch, emulators: dict[str, Any], tmp_path: Path
) -> None:
    from core.storage import http_client

    use_env(monkeypatch, emulators["az"])
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING")
    monkeypatch.setenv(
        "AZURE_STORAGE_ACCOUNT_URL",  # a control character inside the SAS
        f"{emulators['az'].endpoint}/{AZURITE_ACCOUNT}?sv=1&sig={SECRET}\r\nx=1",
    )
    monkeypatch.setattr(http_client, "backoff", lambda attempt: pytest.fail("retried"))
    with pytest.raises(StorageError) as info:
        open_repository("az://container/m", tmp_path).versions()
    assert str(info.value).startswith(
        "Cannot list az://container/m/: the request cannot be sent (InvalidURL: "
    )
    assert SECRET not in str(info.value) and info.value.__cause__ is None
