"""Serving straight from a bucket, per provider (s3 / gs / az on real emulators): predict on
each version, reload picking up added and deleted versions, a config.json in the bucket, a
missing bucket reported while the other models serve, and only policy-selected versions
downloaded. Each version of the scaler multiplies by its version number.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import orjson
import requests

from core.config import Settings
from demo import models
from tests.core.storage.helpers import Store
from tests.core.storage.serving import (
    call,
    delete_version,
    join_retirements,
    kserve_infer,
    predict,
    put_scaler,
    scaled,
    start_app,
    states,
    version_folders,
    wait_state,
)
from tests.core.storage.test_lazy_imports import SDKS
from tests.emulators import REPO
from tests.handlers.conftest import free_port, running
from tests.reload.helpers import wait_for

ALL: dict[str, object] = {"model_version_policy": {"all": {}}}


def _settings(
    store: Store, cache_dir: Path, prefix: str = "repo/scaler", **options: object
) -> Settings:
    return Settings(
        model_name="scaler",
        model_path=store.url(prefix),
        model_options=options or ALL,
        cache_dir=str(cache_dir),
    )


def test_every_version_serves_from_the_bucket(store: Store, cache_dir: Path) -> None:
    for version in (1, 2):
        put_scaler(store, "repo/scaler", version)
    app = start_app(_settings(store, cache_dir))

    assert states(app) == {1: ("AVAILABLE", "OK"), 2: ("AVAILABLE", "OK")}
    assert predict(app, version=1) == (200, scaled(1))
    assert predict(app, version=2) == (200, scaled(2))
    assert predict(app) == (200, scaled(2))  # default = latest
    assert kserve_infer(app, 1) == scaled(1)
    status, doc = call(app, "GET", "/v1/models/scaler/versions/1/metadata")
    assert status == 200 and doc["modelSpec"]["version"] == "1"


def test_reload_picks_up_added_and_deleted_versions(store: Store, cache_dir: Path) -> None:
    for version in (1, 2):
        put_scaler(store, "repo/scaler", version)
    app = start_app(_settings(store, cache_dir))
    assert call(app, "POST", "/v1/config/reload")[0] == 200  # nothing changed

    put_scaler(store, "repo/scaler", 3)
    status, body = call(app, "POST", "/v1/config/reload")
    assert status == 201, body
    assert predict(app, version=3) == (200, scaled(3))
    assert predict(app) == (200, scaled(3))
    assert predict(app, version=1) == (200, scaled(1))

    delete_version(store, "repo/scaler", 1)
    assert call(app, "POST", "/v1/config/reload")[0] == 201
    wait_state(app, 1, "END")
    assert states(app) == {1: ("END", "OK"), 2: ("AVAILABLE", "OK"), 3: ("AVAILABLE", "OK")}
    status, error = predict(app, version=1)
    assert status == 404, error
    assert predict(app) == (200, scaled(3))
    assert predict(app, version=2) == (200, scaled(2))
    # the ended version's download is deleted: a long-lived instance's disk does not fill up
    wait_for(
        lambda: (
            [name.split("-")[0] for name in version_folders(cache_dir, store, "repo/scaler")]
            == ["2", "3"]
        ),
        "v1's download deleted",
    )


def test_a_download_two_models_share_stays_until_both_are_done(
    store: Store, cache_dir: Path, tmp_path: Path
) -> None:
    put_scaler(store, "repo/scaler", 1)
    url = store.url("repo/scaler")
    config = tmp_path / "config.json"

    def serve(*names: str) -> None:
        entries = [{"config": {"name": n, "base_path": url}} for n in names]
        config.write_text(json.dumps({"model_config_list": entries}))

    serve("a", "b")
    app = start_app(Settings(config_path=str(config), cache_dir=str(cache_dir)))
    (folder,) = version_folders(cache_dir, store, "repo/scaler")
    serve("b")
    assert call(app, "POST", "/v1/config/reload")[0] == 201
    wait_state(app, 1, "END", name="a")
    join_retirements()
    assert version_folders(cache_dir, store, "repo/scaler") == [folder]  # b still reads it
    assert predict(app, "b") == (200, scaled(1))
    put_scaler(store, "repo/scaler", 1, factor=5.0)  # b's version 1 changes in the bucket
    assert call(app, "POST", "/v1/config/reload")[0] == 201
    assert predict(app, "b") == (200, scaled(5))
    wait_for(
        lambda: folder not in version_folders(cache_dir, store, "repo/scaler"),
        "the replaced download deleted",
    )
    assert len(version_folders(cache_dir, store, "repo/scaler")) == 1


def test_a_download_another_process_serves_stays_until_it_is_done(
    store: Store, cache_dir: Path, tmp_path: Path
) -> None:
    """Two processes on one cache folder (gunicorn workers; pods on a shared volume): the first
    to end a version leaves the download the other still serves from; the last one deletes it."""
    for version in (1, 2):
        put_scaler(store, "repo/scaler", version)
    port = free_port()
    other = [
        str(Path(sys.executable).parent / "ov-serverless"),
        "serve",
        "--rest_port",
        str(port),
        "--model_name",
        "scaler",
        "--model_path",
        store.url("repo/scaler"),
        "--model_version_policy",
        '{"all": {}}',
        "--cache_dir",
        str(cache_dir),
        "--file_system_poll_wait_seconds",
        "0",
        "--log_level",
        "WARNING",
    ]
    base = f"http://127.0.0.1:{port}"
    with running({"other": (other, port)}, dict(os.environ), tmp_path):
        app = start_app(_settings(store, cache_dir))
        folders = version_folders(cache_dir, store, "repo/scaler")
        assert [name.split("-")[0] for name in folders] == ["1", "2"]

        delete_version(store, "repo/scaler", 1)
        assert call(app, "POST", "/v1/config/reload")[0] == 201
        wait_state(app, 1, "END")
        join_retirements()
        assert version_folders(cache_dir, store, "repo/scaler") == folders
        reply = requests.post(
            f"{base}/v1/models/scaler/versions/1:predict",
            timeout=10,
            json={"instances": [[1, 2, 3, 4]]},
        )
        assert reply.json() == {"predictions": [scaled(1)]}

        assert requests.post(f"{base}/v1/config/reload", timeout=30).status_code == 201
        wait_for(
            lambda: version_folders(cache_dir, store, "repo/scaler") == folders[1:],
            "the last process deleting v1's download",
        )


def test_config_json_in_the_bucket(store: Store, cache_dir: Path) -> None:
    for version in (1, 2):
        put_scaler(store, "models/scaler", version)
    config = {
        "model_config_list": [
            {
                "config": {
                    "name": "scaler",
                    "base_path": "models/scaler",
                    "model_version_policy": {"all": {}},
                }
            }
        ]
    }
    store.put("config.json", orjson.dumps(config))
    app = start_app(Settings(config_path=store.url("config.json"), cache_dir=str(cache_dir)))
    assert predict(app, version=1) == (200, scaled(1))
    assert predict(app, version=2) == (200, scaled(2))

    # the reload re-reads config.json from the bucket: now only version 1 is wanted
    config["model_config_list"][0]["config"]["model_version_policy"] = {
        "specific": {"versions": [1]}
    }
    store.put("config.json", orjson.dumps(config))
    assert call(app, "POST", "/v1/config/reload")[0] == 201
    assert predict(app) == (200, scaled(1))
    got = {v: state for v, (state, _) in states(app).items()}
    assert got[1] == "AVAILABLE" and got[2] in ("UNLOADING", "END")  # listed retired, as OVMS


def test_missing_bucket_is_reported_and_other_models_keep_serving(
    store: Store, cache_dir: Path, tmp_path: Path
) -> None:
    models.save(models.scaler(7.0), tmp_path / "local" / "1")
    missing = f"{store.scheme}://missing-{uuid.uuid4().hex[:10]}/scaler"
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "model_config_list": [
                    {"config": {"name": "local", "base_path": "local"}},
                    {"config": {"name": "ghost", "base_path": missing}},
                ]
            }
        )
    )
    app = start_app(Settings(config_path=str(config), cache_dir=str(cache_dir)))

    for status, error in (call(app, "GET", "/v1/models/ghost"), predict(app, "ghost")):
        assert status == 404, error
        message = error["error"] if isinstance(error, dict) else error
        assert missing in message and "does not exist" in message, message
    assert predict(app, "local") == (200, scaled(7))
    assert call(app, "GET", "/v2/models/local/ready")[0] == 200
    assert call(app, "POST", "/v1/config/reload")[0] == 200
    assert predict(app, "local") == (200, scaled(7))


def test_only_policy_selected_versions_are_downloaded(store: Store, cache_dir: Path) -> None:
    for version in (1, 2, 3):
        put_scaler(store, "repo/scaler", version)
    app = start_app(
        _settings(store, cache_dir, model_version_policy={"latest": {"num_versions": 1}})
    )
    assert set(states(app)) == {3}
    assert [name.split("-")[0] for name in version_folders(cache_dir, store, "repo/scaler")] == [
        "3"
    ]
    assert predict(app) == (200, scaled(3))


LOCAL_PROBE = """
import json, sys, pathlib
from core.api import App, make_request
from core.config import Settings
from core.serving.registry import ModelManager
from demo import models
base = pathlib.Path(sys.argv[1])
models.save(models.scaler(2.0), base / "scaler" / "1")
settings = Settings(model_name="scaler", model_path=str(base / "scaler"),
                    cache_dir=str(base / "cache"))
app = App(ModelManager.start(settings), settings)
body = b'{"instances": [[1, 2, 3, 4]]}'
reply = app.handle(make_request("POST", "/v1/models/scaler:predict", body))
assert reply.status == 200, reply.body
assert app.handle(make_request("POST", "/v1/config/reload")).status == 200
print(json.dumps(sorted(sys.modules)))
"""


def test_serving_from_local_disk_imports_no_cloud_sdk(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", LOCAL_PROBE, str(tmp_path)],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    modules = json.loads(out.stdout.strip().splitlines()[-1])
    assert "core.serving.registry" in modules
    loaded = [m for m in modules if any(m == s or m.startswith(s + ".") for s in SDKS)]
    assert loaded == []
    assert not {"core.storage.s3", "core.storage.gcs", "core.storage.azure"} & set(modules)
