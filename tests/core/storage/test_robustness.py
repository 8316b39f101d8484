"""One model's bad storage never stops the others: stray object names, a download that keeps
dropping, a redirect loop and a full cache disk each fail only their model (or version), with a
cause a user can act on."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from core.config import Settings
from core.errors import StorageError
from core.storage import folders, http_client, open_repository
from demo import models
from tests.core.storage.helpers import Front, S3Store, Store, forward, use_env
from tests.core.storage.serving import predict, put_scaler, scaled, start_app, states
from tests.emulators import REPO, Emulator

NUL_NAME = "weights\0.bin"  # Azurite cannot list such a name: checked on S3 and GCS


def test_stray_names_in_a_bucket_fail_only_their_version(store: Store, tmp_path: Path) -> None:
    put_scaler(store, "good", 1)
    put_scaler(store, "odd", 1)
    put_scaler(store, "odd", 2)
    store.put("odd/²/model.xml", b"<net/>")  # str.isdigit() says yes, int() says no
    store.put("odd/01/model.xml", b"<net/>")
    if store.scheme != "az":
        store.put(f"odd/2/{NUL_NAME}", b"x")
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "model_config_list": [
                    {"config": {"name": "good", "base_path": store.url("good")}},
                    {
                        "config": {
                            "name": "odd",
                            "base_path": store.url("odd"),
                            "model_version_policy": {"all": {}},
                        }
                    },
                ]
            }
        )
    )
    app = start_app(Settings(config_path=str(config), cache_dir=str(tmp_path / "cache")))

    assert predict(app, "good") == (200, scaled(1))
    assert predict(app, "odd", version=1) == (200, scaled(1))
    found = states(app, "odd")
    assert sorted(found) == [1, 2], found  # '²' and '01' are no version folders
    if store.scheme != "az":
        state, message = found[2]
        assert state == "LOADING" and "cannot be a file name" in message, found
        assert "weights\\\\0.bin" in message, message


def test_names_the_cache_cannot_hold_fail_their_version_and_show_no_server_path(
    store: Store, tmp_path: Path
) -> None:
    """A key that is a file and a folder prefix at once, or a name longer than a file system
    takes: the version fails with a cause naming the object, not the cache dir's path."""
    for version in (1, 2, 3):
        put_scaler(store, "m", version)
    store.put("m/2/model.bin/extra", b"x")  # model.bin is a file and a folder
    store.put("m/3/" + "n" * 300, b"x")  # past NAME_MAX (255)
    cache = tmp_path / "cache"
    app = start_app(
        Settings(
            model_name="scaler",
            model_path=store.url("m"),
            model_options={"model_version_policy": {"all": {}}},
            cache_dir=str(cache),
        )
    )

    assert predict(app, version=1) == (200, scaled(1))
    found = states(app)
    assert found[2][0] == "LOADING" and "'m/2/model.bin/extra'" in found[2][1], found
    assert "both a file and a folder" in found[2][1], found
    assert found[3][0] == "LOADING" and "File name too long" in found[3][1], found
    status, error = predict(app, version=3)
    assert status == 404 and "File name too long" in error, error
    for message in (found[2][1], found[3][1], error):
        assert str(tmp_path) not in message, message  # no server path in a message clients see
    assert not [p for p in cache.rglob("*") if p.name.startswith(("2-", "3-", ".2-", ".3-"))]


def test_stray_names_on_local_disk_fail_nothing(tmp_path: Path) -> None:
    models.save(models.scaler(1.0), tmp_path / "m" / "1")
    models.save(models.scaler(3.0), tmp_path / "m" / "²")
    (tmp_path / "m" / "01").mkdir()
    (tmp_path / "m" / "99999999999999999999999").mkdir()  # past gRPC's int64 version
    app = start_app(
        Settings(
            model_name="scaler",
            model_path=str(tmp_path / "m"),
            model_options={"model_version_policy": {"all": {}}},
            cache_dir=str(tmp_path / "cache"),
        )
    )
    assert sorted(states(app)) == [1]
    assert predict(app) == (200, scaled(1))


# --- boto3 glue -------------------------------------------------------------------------------


class DroppingFront(Front):
    """Forwards to moto, but every GET of an object ends after half its body (the connection
    closes under the reader), as a flaky network would."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.dropped = 0
        super().__init__()

    def answer(self, request: Any) -> tuple[int, dict[str, str], bytes]:
        status, headers, body = forward(self.port, request.path, dict(request.headers))
        if "list-type" in request.path or status >= 300 or request.command == "HEAD":
            return status, headers, body
        self.dropped += 1
        request.send_response(status)
        for name, value in headers.items():
            request.send_header(name, value)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body[: len(body) // 2])
        request.wfile.flush()
        request.close_connection = True
        raise ConnectionAbortedError("dropped on purpose")  # ends the handler: no 2nd answer


@pytest.fixture
def boto3_store(emulators: dict[str, Emulator], monkeypatch: pytest.MonkeyPatch) -> Store:
    use_env(monkeypatch, emulators["s3"])
    monkeypatch.setenv("OVS_S3_CLIENT", "boto3")
    return S3Store(emulators["s3"]).create()


def test_a_download_that_keeps_dropping_is_a_storage_error_on_boto3(
    boto3_store: Store, tmp_path: Path
) -> None:
    front = DroppingFront(boto3_store.emulator.port)
    try:
        put_scaler(boto3_store, "m", 1)
        url = f"s3://{front.host}/{boto3_store.bucket}/m"
        with pytest.raises(
            StorageError,
            match=r"Cannot download s3://.*/m/1/model\.\w+: "
            r"cannot reach the S3 endpoint",
        ):
            open_repository(url, tmp_path / "direct").fetch(1)
        app = start_app(Settings(model_name="m", model_path=url, cache_dir=str(tmp_path)))
        state, message = states(app, "m")[1]
        assert state == "LOADING" and "cannot reach the S3 endpoint" in message
    finally:
        front.close()
    assert front.dropped >= 2  # retried, as boto3 retries


class RedirectLoop(Front):
    """Answers everything, HEAD included, with a 301 that names no region: botocore's region
    redirector asks HeadBucket for it, which redirects again."""

    def answer(self, request: Any) -> tuple[int, dict[str, str], bytes]:
        return 301, {}, b"<Error><Code>PermanentRedirect</Code><Message>m</Message></Error>"


def test_a_redirect_loop_is_a_storage_error_on_boto3(
    monkeypatch: pytest.MonkeyPatch, emulators: dict[str, Emulator], tmp_path: Path
) -> None:
    use_env(monkeypatch, emulators["s3"])
    monkeypatch.setenv("OVS_S3_CLIENT", "boto3")
    loop = RedirectLoop()
    try:
        url = f"s3://{loop.host}/bucket/m"
        with pytest.raises(
            StorageError,
            match=r"Cannot list s3://bucket/m/: the S3 endpoint "
            r"answers with a redirect loop",
        ):
            open_repository(url, tmp_path).versions()
        models.save(models.scaler(2.0), tmp_path / "local" / "1")
        config = tmp_path / "config.json"
        config.write_text(
            json.dumps(
                {
                    "model_config_list": [
                        {"config": {"name": "loop", "base_path": url}},
                        {"config": {"name": "local", "base_path": str(tmp_path / "local")}},
                    ]
                }
            )
        )
        app = start_app(Settings(config_path=str(config), cache_dir=str(tmp_path / "cache")))
        assert predict(app, "local") == (200, scaled(2))
        assert "redirect loop" in predict(app, "loop")[1]
    finally:
        loop.close()


# --- a full cache disk ------------------------------------------------------------------------

_FILL = r"""
import json, resource, signal, sys, time
from pathlib import Path
from core.storage import http_client, open_repository
limit = int(sys.argv[3])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
def no_retry(attempt):
    raise AssertionError(f"retried ({attempt}) after a full disk")
http_client.backoff = no_retry
started = time.monotonic()
try:
    open_repository(sys.argv[1], Path(sys.argv[2])).fetch(1)
    print(json.dumps({"error": None}))
except Exception as exc:
    print(json.dumps({"type": type(exc).__name__, "error": str(exc),
                      "seconds": time.monotonic() - started}))
"""


@pytest.mark.parametrize("size", [6 << 20, 20 << 20], ids=["whole", "ranged"])
def test_a_full_cache_disk_is_reported_at_once(store: Store, tmp_path: Path, size: int) -> None:
    store.put("m/1/model.xml", b"<net/>")
    store.put("m/1/model.bin", b"\1" * size)
    out = subprocess.run(
        [sys.executable, "-c", _FILL, store.url("m"), str(tmp_path / "cache"), str(2 << 20)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["type"] == "StorageError", result
    assert "no space left in the cache dir" in result["error"], result
    assert f"({size / 1e6:.1f} MB needed)" in result["error"], result
    assert "cannot reach" not in result["error"]
    assert str(tmp_path) not in result["error"]  # no server path in a message clients see
    assert not [p for p in (tmp_path / "cache").rglob("model.bin")]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG, errno.EDQUOT])
def test_a_full_disk_is_never_retried_as_a_network_error(
    code: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def once() -> None:
        calls.append(1)
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(http_client, "backoff", lambda attempt: pytest.fail("retried"))
    with pytest.raises(OSError) as info:
        http_client.retrying(
            once, lambda exc: StorageError("no"), "Cannot download x: cannot reach"
        )
    assert info.value.errno == code and calls == [1]
    assert "no space left in the cache dir" in folders.no_space("s3://b/m", 5_000_000).message
