"""Hot reload through the in-process App (the router every handler shares): config diffs
reload only what changed, POST /v1/config/reload answers 201 / 200 / an error, a removed
version finishes its in-flight requests, serverless reloads on the request path, lazy load."""

from __future__ import annotations

import logging
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from core.config import Settings
from core.serving.servable import State
from protos.gen.kserve.grpc_predict_v2_pb2 import ModelReadyRequest
from protos.gen.kserve.grpc_predict_v2_pb2_grpc import GRPCInferenceServiceStub
from tests.core.serving.pipeline.helpers import grpc_channel
from tests.reload.helpers import (
    app_sender,
    corrupt_in_place,
    put_corrupt_version,
    put_version,
    remove_version,
    start_app,
    states,
    wait_for,
    write_config_atomic,
)
from tests.reload.helpers import predict as _predict


def settings(tmp_path: Path, config: Path, **overrides: Any) -> Settings:
    return Settings(config_path=str(config), cache_dir=str(tmp_path / "cache"), **overrides)


def test_config_diff_reloads_only_the_changed_models(tmp_path: Path) -> None:
    names = ["keep", "nireq", "plugin", "shape", "dropped", "added"]
    for name in names:
        put_version(tmp_path / name, 1, factor=float(len(name)))
    base = [{"name": n, "base_path": n} for n in names[:-1]]
    config = write_config_atomic(tmp_path / "config.json", base)
    app = start_app(settings(tmp_path, config))
    send = app_sender(app)
    before = {n: app.manager.models[n].versions[1] for n in names[:-1]}
    assert send("POST", "/v1/config/reload")[0] == 200  # nothing changed

    changed = {
        "nireq": {"nireq": 3},
        "plugin": {"plugin_config": {"NUM_STREAMS": 1}},
        "shape": {"shape": "(1,4)"},
    }
    write_config_atomic(
        config,
        [
            {**entry, **changed.get(entry["name"], {})}
            for entry in base
            if entry["name"] != "dropped"
        ]
        + [{"name": "added", "base_path": "added"}],
    )
    status, doc = send("POST", "/v1/config/reload")
    assert status == 201, doc
    assert set(doc) == {"keep", "nireq", "plugin", "shape", "added", "dropped"}
    assert doc["dropped"]["model_version_status"][0]["state"] in ("UNLOADING", "END")
    after = {n: app.manager.models[n].versions[1] for n in app.manager.models}
    assert after["keep"] is before["keep"]  # untouched, not recompiled
    assert after["keep"].status.state is State.AVAILABLE
    for name in changed:
        assert after[name] is not before[name] and after[name].available
        assert before[name].status.state >= State.UNLOADING  # retired, not serving
    assert after["nireq"].config.nireq == 3
    assert after["plugin"].config.plugin_config == {"NUM_STREAMS": 1}
    assert after["shape"].inputs["x"].dims == ((1, 1), (4, 4))
    assert before["dropped"].status.state >= State.UNLOADING
    assert _predict(send, "dropped")[0] == 404
    for name in ("keep", "nireq", "plugin", "shape", "added"):
        assert _predict(send, name) == (200, float(len(name)))
    assert send("POST", "/v1/config/reload")[0] == 200
    wait_for(lambda: before["dropped"].status.state is State.END, "dropped model END")
    # as OVMS: a removed model stays listed with its versions END, and is not served
    assert states(send, "dropped") == {1: ("END", "OK")}
    assert send("GET", "/v1/config")[1]["dropped"]["model_version_status"][0]["state"] == "END"
    assert _predict(send, "dropped")[0] == 404
    assert send("GET", "/v2/models/dropped/ready")[0] != 200
    write_config_atomic(config, [*base, {"name": "added", "base_path": "added"}])
    assert send("POST", "/v1/config/reload")[0] == 201  # back in the config: served again
    assert _predict(send, "dropped") == (200, float(len("dropped")))
    assert states(send, "dropped") == {1: ("AVAILABLE", "OK")}


def test_broken_config_is_rejected_as_a_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    put_version(tmp_path / "m", 1)
    entries = [{"name": "m", "base_path": "m"}]
    config = write_config_atomic(tmp_path / "config.json", entries)
    app = start_app(settings(tmp_path, config))
    send = app_sender(app)
    served = app.manager.models["m"].versions[1]
    put_version(tmp_path / "m", 2)  # would be a change, were the config readable
    cases = [
        ('{"model_config_list": [', "Configuration file is not a valid JSON file"),
        (
            '{"model_config_list": [{"config": {"name": "m", "base_path": "m", '
            '"nireq": 2, "bogus": 1}}]}',
            "unknown field (JSON schema parse error)",
        ),
        (
            '{"model_config_list": [{"config": {"name": "m", "base_path": "m"}}, '
            '{"config": {"name": "m", "base_path": "m"}}]}',
            "is duplicated",
        ),
    ]
    for raw, message in cases:
        write_config_atomic(config, raw=raw)
        caplog.clear()
        with caplog.at_level(logging.ERROR, "ov_serverless.manager"):
            for _ in range(3):
                status, doc = send("POST", "/v1/config/reload")
                assert status == 400 and message in doc["error"], doc
        assert len([r for r in caplog.records if message in r.getMessage()]) == 1
        assert app.manager.models["m"].versions == {1: served}
        assert _predict(send, "m") == (200, 1.0)
        assert set(send("GET", "/v1/config")[1]) == {"m"}
    config.unlink()
    status, doc = send("POST", "/v1/config/reload")
    assert status == 400 and "Config file not found or cannot open" in doc["error"]
    write_config_atomic(config, entries)
    assert send("POST", "/v1/config/reload")[0] == 201  # now v2 is picked up
    assert _predict(send, "m") == (200, 2.0)


def test_reload_answers_201_when_something_changed_and_200_when_not(tmp_path: Path) -> None:
    put_version(tmp_path / "m", 1)
    put_version(tmp_path / "n", 1, factor=5.0)
    config = write_config_atomic(
        tmp_path / "config.json",
        [
            {"name": "m", "base_path": "m", "model_version_policy": {"all": {}}},
            {"name": "n", "base_path": "n"},
        ],
    )
    app = start_app(settings(tmp_path, config))
    send = app_sender(app)
    reload = lambda: send("POST", "/v1/config/reload")  # noqa: E731
    assert reload()[0] == 200
    put_version(tmp_path / "m", 2)
    status, doc = reload()
    assert status == 201
    assert doc["m"]["model_version_status"][1]["state"] == "AVAILABLE"
    assert reload()[0] == 200
    put_corrupt_version(tmp_path / "m", 3, "model.xml")
    assert reload()[0] == 201  # a new (failed) version is a change...
    assert reload()[0] == 200  # ...failing again the same way is not
    assert states(send, "m")[3][0] == "LOADING"
    remove_version(tmp_path / "m", 3)
    assert reload()[0] == 201
    assert reload()[0] == 200
    doc = send("GET", "/v1/config")[1]
    assert {
        n: [(v["version"], v["state"]) for v in e["model_version_status"]] for n, e in doc.items()
    } == {
        "m": [("1", "AVAILABLE"), ("2", "AVAILABLE"), ("3", "UNLOADING")],
        "n": [("1", "AVAILABLE")],
    }


def test_a_version_a_changed_config_drops_stays_listed_as_retired(tmp_path: Path) -> None:
    """A version policy change that drops a version lists it as OVMS does, UNLOADING then
    END, and a request for it is answered "retired"; it vanished from the status and was
    answered "not found" as if it never existed."""
    put_version(tmp_path / "m", 1)
    put_version(tmp_path / "m", 2, factor=5.0)
    entry = {"name": "m", "base_path": "m", "model_version_policy": {"all": {}}}
    config = write_config_atomic(tmp_path / "config.json", [entry])
    app = start_app(settings(tmp_path, config))
    send = app_sender(app)
    write_config_atomic(
        config, [{**entry, "model_version_policy": {"latest": {"num_versions": 1}}}]
    )
    assert send("POST", "/v1/config/reload")[0] == 201
    wait_for(lambda: states(send, "m")[1][0] == "END", "version 1 to end")
    assert states(send, "m")[2][0] == "AVAILABLE"
    status, doc = send("GET", "/v2/models/m/versions/1/ready")
    assert status == 404
    assert "Model with requested version is retired - name: m; version: 1" in doc["error"]
    assert send("GET", "/v2/models/m")[1]["versions"] == ["2"]
    with grpc_channel(app.manager) as channel:  # a known version: false, not NOT_FOUND
        ready = GRPCInferenceServiceStub(channel).ModelReady
        assert not ready(ModelReadyRequest(name="m", version="1"), timeout=10).ready
        assert ready(ModelReadyRequest(name="m", version="2"), timeout=10).ready
    # wanted again: loaded again
    write_config_atomic(config, [entry])
    assert send("POST", "/v1/config/reload")[0] == 201
    assert {v: s for v, (s, _) in states(send, "m").items()} == {1: "AVAILABLE", 2: "AVAILABLE"}


def test_failed_replacement_shows_in_the_status_until_good_files_replace_it(tmp_path: Path) -> None:
    put_version(tmp_path / "m", 1, factor=2.0)
    config = write_config_atomic(tmp_path / "config.json", [{"name": "m", "base_path": "m"}])
    app = start_app(settings(tmp_path, config))
    send = app_sender(app)
    corrupt_in_place(tmp_path / "m" / "1", "model.bin")
    assert send("POST", "/v1/config/reload")[0] == 201
    state, message = states(send, "m")[1]
    assert state == "AVAILABLE"
    assert "changed files failed to load" in message and "bin" in message, message
    assert _predict(send, "m") == (200, 2.0)  # the loaded copy keeps serving
    shutil.rmtree(tmp_path / "m" / "1")
    put_version(tmp_path / "m", 1, factor=6.0)
    assert send("POST", "/v1/config/reload")[0] == 201
    assert states(send, "m")[1] == ("AVAILABLE", "OK")
    assert _predict(send, "m") == (200, 6.0)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"shape": {"nope": "(1,4)"}}, "input that the model does not have: nope"),
        ({"base_path": "nowhere"}, "base path is invalid"),
    ],
)
def test_a_changed_config_that_fails_shows_in_the_status_while_the_old_one_serves(
    tmp_path: Path, change: dict[str, Any], reason: str
) -> None:
    put_version(tmp_path / "m", 1, factor=2.0)
    entries = [{"name": "m", "base_path": "m"}]
    config = write_config_atomic(tmp_path / "config.json", entries)
    app = start_app(settings(tmp_path, config))
    send = app_sender(app)
    write_config_atomic(config, [{**entries[0], **change}])
    status, doc = send("POST", "/v1/config/reload")
    assert status == 201, doc
    (listed,) = doc["m"]["model_version_status"]
    assert listed["state"] == "AVAILABLE"
    assert listed["status"]["error_code"] == "UNKNOWN"
    message = listed["status"]["error_message"]
    assert "changed config failed to load" in message and reason in message, message
    assert str(tmp_path) not in message
    assert _predict(send, "m") == (200, 2.0)  # the previous config keeps serving
    assert send("POST", "/v1/config/reload")[0] == 200  # not retried as is
    assert states(send, "m")[1] == ("AVAILABLE", message)
    write_config_atomic(config, entries)  # the edit undone: the serving config is right again
    send("POST", "/v1/config/reload")
    assert states(send, "m") == {1: ("AVAILABLE", "OK")}
    assert _predict(send, "m") == (200, 2.0)


def test_a_model_back_in_the_config_with_the_change_that_failed_is_loaded_again(
    tmp_path: Path,
) -> None:
    put_version(tmp_path / "m", 1, factor=2.0)
    put_version(tmp_path / "n", 1, factor=3.0)
    good = {"name": "m", "base_path": "m"}
    broken = {**good, "shape": {"nope": "(1,4)"}}
    other = {"name": "n", "base_path": "n"}
    config = write_config_atomic(tmp_path / "config.json", [good])
    app = start_app(settings(tmp_path, config))
    send = app_sender(app)
    write_config_atomic(config, [broken])
    assert send("POST", "/v1/config/reload")[0] == 201  # m keeps its previous config
    write_config_atomic(config, [other])
    assert send("POST", "/v1/config/reload")[0] == 201  # m removed
    write_config_atomic(config, [broken, other])
    status, doc = send("POST", "/v1/config/reload")
    assert status == 201, doc  # was a 500 (KeyError), and every later reload too
    assert states(send, "m")[1][0] == "LOADING"  # nothing kept: the failed config is m's now
    assert "does not have: nope" in states(send, "m")[1][1]
    write_config_atomic(config, [good, other])
    assert send("POST", "/v1/config/reload")[0] == 201
    assert _predict(send, "m") == (200, 2.0)
    assert _predict(send, "n") == (200, 3.0)


def test_removed_version_finishes_its_in_flight_requests(tmp_path: Path) -> None:
    for version in (1, 2):
        put_version(tmp_path / "m", version)
    config = write_config_atomic(
        tmp_path / "config.json",
        [{"name": "m", "base_path": "m", "model_version_policy": {"all": {}}}],
    )
    app = start_app(settings(tmp_path, config))
    send = app_sender(app)
    resolved = app.manager.get("m", 2)  # a request that picked v2 and is still decoding
    held = app.manager.get("m", 2)
    release = threading.Event()

    def in_flight() -> None:
        with held.serving():
            release.wait(10)

    worker = threading.Thread(target=in_flight)
    worker.start()
    remove_version(tmp_path / "m", 2)
    assert send("POST", "/v1/config/reload")[0] == 201
    assert states(send, "m")[2][0] == "UNLOADING"  # at once: no new request gets v2
    assert _predict(send, "m") == (200, 1.0)
    status, error = _predict(send, "m", 2)
    assert status == 404 and "retired" in error
    import numpy as np

    out = resolved.infer({"x": np.ones((1, 4), np.float32)})  # still runs on v2
    assert out["y"].tolist() == [[2.0] * 4]
    time.sleep(2.5)  # past the retire grace: the held request still keeps v2 alive
    assert states(send, "m")[2][0] == "UNLOADING"
    release.set()
    worker.join()
    wait_for(lambda: states(send, "m")[2][0] == "END", "v2 END", 5)
    put_version(tmp_path / "m", 2, factor=20.0)  # re-added: a fresh incarnation
    assert send("POST", "/v1/config/reload")[0] == 201
    assert _predict(send, "m", 2) == (200, 20.0)


def test_serverless_reloads_on_a_request_once_the_interval_passed(tmp_path: Path) -> None:
    interval = 1.0
    put_version(tmp_path / "m", 1)
    config = write_config_atomic(tmp_path / "config.json", [{"name": "m", "base_path": "m"}])
    app = start_app(settings(tmp_path, config, reload_interval=interval))
    send = app_sender(app)
    assert not [t for t in threading.enumerate() if t.name == "repository-poller"]
    checked = app.manager._last_check
    put_version(tmp_path / "m", 2)
    answer = _predict(send, "m")
    if time.monotonic() - checked < interval * 0.9:  # not due yet: the old answer
        assert answer == (200, 1.0)
    time.sleep(max(0.0, checked + interval - time.monotonic()) + 0.05)
    assert _predict(send, "m") == (200, 2.0)  # this very request saw the new version
    assert not [t for t in threading.enumerate() if t.name == "repository-poller"]


def test_lazy_load_with_reload(tmp_path: Path) -> None:
    put_version(tmp_path / "m", 1)
    entries = [{"name": "m", "base_path": "m", "model_version_policy": {"all": {}}}]
    config = write_config_atomic(tmp_path / "config.json", entries)
    app = start_app(settings(tmp_path, config, lazy_load=True))
    send = app_sender(app)
    assert states(send, "m")[1][0] == "START"
    assert _predict(send, "m") == (200, 1.0)
    put_version(tmp_path / "m", 2)
    assert send("POST", "/v1/config/reload")[0] == 201
    assert states(send, "m")[2][0] == "START"  # found, compiled on first use
    assert _predict(send, "m") == (200, 2.0)
    assert _predict(send, "m", 1) == (200, 1.0)
    remove_version(tmp_path / "m", 2)
    assert send("POST", "/v1/config/reload")[0] == 201
    assert _predict(send, "m") == (200, 1.0)
    write_config_atomic(config, [{**entries[0], "nireq": 2}])
    assert send("POST", "/v1/config/reload")[0] == 201
    assert _predict(send, "m") == (200, 1.0)
    assert app.manager.models["m"].versions[1].config.nireq == 2


def test_latest_policy_keeps_serving_while_the_newer_version_is_broken(tmp_path: Path) -> None:
    put_version(tmp_path / "m", 1)
    config = write_config_atomic(tmp_path / "config.json", [{"name": "m", "base_path": "m"}])
    app = start_app(settings(tmp_path, config))
    send = app_sender(app)
    put_corrupt_version(tmp_path / "m", 2, "model.bin")
    assert send("POST", "/v1/config/reload")[0] == 201
    found = states(send, "m")
    assert found[1] == ("AVAILABLE", "OK")  # not displaced by a version that cannot serve
    assert found[2][0] == "LOADING" and "model.bin" in found[2][1], found
    assert _predict(send, "m") == (200, 1.0)
    assert _predict(send, "m", 1) == (200, 1.0)
    remove_version(tmp_path / "m", 2)
    put_version(tmp_path / "m", 2)  # fixed: now it displaces v1
    assert send("POST", "/v1/config/reload")[0] == 201
    assert _predict(send, "m") == (200, 2.0)
    assert states(send, "m")[1][0] == "UNLOADING"
    assert send("POST", "/v1/config/reload")[0] == 200


def test_lazy_latest_policy_keeps_the_old_version_until_the_new_one_loads(tmp_path: Path) -> None:
    put_version(tmp_path / "m", 1)
    config = write_config_atomic(tmp_path / "config.json", [{"name": "m", "base_path": "m"}])
    app = start_app(settings(tmp_path, config, lazy_load=True))
    send = app_sender(app)
    assert _predict(send, "m") == (200, 1.0)
    put_version(tmp_path / "m", 2)
    assert send("POST", "/v1/config/reload")[0] == 201
    assert [s for s, _ in states(send, "m").values()] == ["AVAILABLE", "START"]
    assert _predict(send, "m") == (200, 2.0)  # loaded on first use, then v1 retires
    assert states(send, "m")[1][0] == "UNLOADING"
    put_corrupt_version(tmp_path / "m", 3, "model.xml")
    assert send("POST", "/v1/config/reload")[0] == 201
    assert _predict(send, "m") == (200, 2.0)  # v3 failed on first use: v2 stands in
    assert states(send, "m")[2] == ("AVAILABLE", "OK")
    assert states(send, "m")[3][0] == "LOADING"


def test_local_listing_survives_versions_deleted_while_it_reads(tmp_path: Path) -> None:
    from core.storage.local import LocalRepository

    base = tmp_path / "m"
    put_version(base, 1)
    repository = LocalRepository(str(base))
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            folder = base / "2"
            folder.mkdir()
            for index in range(200):
                (folder / f"f{index}").write_bytes(b"x")
            shutil.rmtree(folder)

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            assert 1 in repository.versions()  # never an OSError from a vanishing folder
    finally:
        stop.set()
        worker.join()
