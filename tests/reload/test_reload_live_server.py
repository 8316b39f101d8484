"""Hot reload on a real `ov-serverless serve` (the background poller every 0.5 s):
versions and config change on disk while a closed-loop client predicts; no reload call is
ever needed, no request that targets a version which stays available fails, and every
answer comes from a version that was AVAILABLE."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.core.helpers import RunningServer, error_of
from tests.reload.helpers import (
    ClosedLoopClient,
    Send,
    StatusRecorder,
    assert_never_goes_back,
    corrupt_in_place,
    predict,
    put_corrupt_version,
    put_version,
    remove_version,
    states,
    wait_for,
    write_config_atomic,
)

POLL_S = 0.5
PICKUP_S = 8.0  # bound for a change on disk to be served, without any reload call


def http_sender(url: str) -> Callable[[], Send]:
    def make() -> Send:
        session = requests.Session()

        def send(method: str, path: str, doc: Any = None) -> tuple[int, Any]:
            response = session.request(method, url + path, json=doc, timeout=30)
            return response.status_code, response.json() if response.content else None

        return send

    return make


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("live-reload")
    for version in (1, 2):
        put_version(root / "m", version)
    put_version(root / "other", 1, factor=7.0)
    return root


def entries(*names: str) -> list[dict[str, Any]]:
    policy = {"all": {}}
    return [{"name": n, "base_path": n, "model_version_policy": policy} for n in names]


@pytest.fixture(scope="module")
def server(repo: Path, server_factory: Callable[..., RunningServer]) -> RunningServer:
    config = write_config_atomic(repo / "config.json", entries("m", "other"))
    return server_factory(config, "--file_system_poll_wait_seconds", str(POLL_S))


def test_versions_change_under_load_without_failed_requests(
    repo: Path, server: RunningServer
) -> None:
    make_send = http_sender(server.url)
    send = make_send()
    base = repo / "m"
    client = ClosedLoopClient(make_send, "m", explicit=[2], per_thread=120, pause_s=0.04)
    with StatusRecorder(make_send(), "m") as recorder, client:
        time.sleep(0.3)
        # 1. a new version: published only once AVAILABLE, then "latest" switches to it
        added_at = time.monotonic()
        put_version(base, 3)
        v3_at = wait_for(
            lambda: states(send, "m").get(3, ("",))[0] == "AVAILABLE",
            "v3 AVAILABLE (poller, no reload call)",
            PICKUP_S,
        )
        assert predict(send, "m") == (200, 3.0)
        # 2. a removed version: UNLOADING at once, END once its requests are done
        remove_version(base, 1)
        wait_for(lambda: states(send, "m")[1][0] == "END", "v1 END", PICKUP_S)
        status, error = predict(send, "m", 1)
        assert status == 404 and "retired" in error, error
        # 3. new version numbers with corrupt files: reported, nothing else disturbed
        put_corrupt_version(base, 4, "model.xml")
        put_corrupt_version(base, 5, "model.bin")
        wait_for(lambda: {4, 5} <= set(states(send, "m")), "v4, v5 reported", PICKUP_S)
        # 4. a served version's files turn corrupt: the loaded copy keeps serving
        corrupt_in_place(base / "2", "model.bin")
        time.sleep(3 * POLL_S)
        time.sleep(0.3)
    answers = client.answers
    for thread in range(client.threads):  # traffic on both sides of the new version
        mine = [a for a in answers if a.thread == thread]
        assert any(a.ended < added_at for a in mine) and any(a.started > v3_at for a in mine)
    failed = [a for a in answers if a.status != 200]
    assert not failed, failed[:5]
    assert {a.result for a in answers if a.version == 2} == {2.0}
    recorder.assert_answers_from_available(answers)
    latest = [a for a in answers if a.version is None]
    assert {a.result for a in latest} == {2.0, 3.0}
    assert all(a.result == 2.0 for a in latest if a.ended < added_at)
    assert all(a.result == 3.0 for a in latest if a.started > v3_at)
    for thread in range(client.threads):  # one switch, never back
        seen = [a.result for a in latest if a.thread == thread]
        assert seen == sorted(seen), seen

    final = states(send, "m")
    assert final[1] == ("END", "OK")
    assert final[2][0] == "AVAILABLE" and final[3] == ("AVAILABLE", "OK")
    assert "changed files failed to load" in final[2][1], final[2]  # the status tells
    assert "Incorrect weights in bin file" in final[2][1], final[2]
    assert final[4][0] == "LOADING" and "model.xml" in final[4][1], final[4]
    assert final[5][0] == "LOADING" and "Incorrect weights in bin file" in final[5][1], final[5]
    assert "Exception from" not in final[4][1] + final[5][1]
    assert predict(send, "m", 2) == (200, 2.0)
    assert predict(send, "other") == (200, 7.0)
    assert "changed files failed to load" in server.log()

    # status: every transition seen in order, none going back; v3 visible only AVAILABLE
    assert recorder.history(1)[0] == "AVAILABLE" and recorder.history(1)[-1] == "END"
    for version in (1, 2, 3, 4, 5):
        assert_never_goes_back(recorder.history(version))
    assert recorder.history(2) == ["AVAILABLE"]
    assert recorder.history(3) == ["AVAILABLE"]
    assert recorder.history(4) == ["LOADING"] and recorder.history(5) == ["LOADING"]
    assert recorder.first_available(3) >= added_at


def test_config_changes_are_picked_up_and_broken_config_keeps_serving(
    repo: Path, server: RunningServer
) -> None:
    make_send = http_sender(server.url)
    send = make_send()
    put_version(repo / "added", 1, factor=11.0)
    config = repo / "config.json"
    client = ClosedLoopClient(make_send, "m", explicit=[3], per_thread=80, pause_s=0.04)
    with client:
        # a model added and a model removed, by the poller alone
        write_config_atomic(config, entries("m", "added"))
        wait_for(lambda: predict(send, "added") == (200, 11.0), "model added", PICKUP_S)
        wait_for(lambda: predict(send, "other")[0] == 404, "model removed", PICKUP_S)
        # one model's nireq, plugin_config and shape change: only that model reloads
        loads_of_m = _loads(server, "m")
        assert loads_of_m >= 3  # v1, v2 at start, v3 (and the corrupt ones) since
        added = entries("added")[0]
        write_config_atomic(
            config,
            [
                *entries("m"),
                {**added, "nireq": 2, "shape": "(1,4)", "plugin_config": {"NUM_STREAMS": 1}},
            ],
        )
        wait_for(lambda: _shape(server, "added") == ["1", "4"], "added reshaped", PICKUP_S)
        assert predict(send, "added") == (200, 11.0)
        assert _loads(server, "m") == loads_of_m  # m was not recompiled
        # broken configs: rejected as a whole, the API says why, the old config serves on
        for raw, message in (
            ('{"model_config_list": [', "not a valid JSON file"),
            (
                '{"model_config_list": [{"config": {"name": "m", "base_path": "m", "bogus": 1}}]}',
                "unknown field",
            ),
        ):
            write_config_atomic(config, raw=raw)
            response = server.post("/v1/config/reload")
            assert response.status_code == 400, response.text
            assert message in error_of(response)
            time.sleep(2 * POLL_S)
            assert predict(send, "added") == (200, 11.0)
            listed = server.get("/v1/config").json()
            assert listed.keys() == {"m", "added", "other"}  # other: removed, listed as END
            assert listed["other"]["model_version_status"][0]["state"] in ("UNLOADING", "END")
        write_config_atomic(config, entries("m", "added"))
        wait_for(
            lambda: server.post("/v1/config/reload").status_code == 200,
            "nothing left to reload",
            PICKUP_S,
        )
    assert client.answers and all(a.status == 200 for a in client.answers), [
        a for a in client.answers if a.status != 200
    ][:5]
    assert {a.result for a in client.answers} == {3.0}
    log = server.log()
    assert log.count("Configuration file is not a valid JSON file") <= 3, log[-2000:]
    doc = server.get("/v1/config").json()
    assert {int(v["version"]): v["state"] for v in doc["m"]["model_version_status"]} == {
        1: "END",
        2: "AVAILABLE",
        3: "AVAILABLE",
        4: "LOADING",
        5: "LOADING",
    }
    assert [v["state"] for v in doc["added"]["model_version_status"]] == ["AVAILABLE"]
    assert [v["state"] for v in doc["other"]["model_version_status"]] == ["END"]


def _loads(server: RunningServer, name: str) -> int:
    """How many times the server log says a version of `name` started loading."""
    needle = f'of model {name} status change. New status: ( "state": "LOADING"'
    count = 0
    for line in server.log_path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            count += needle in json.loads(line).get("message", "")
    return count


def _shape(server: RunningServer, name: str) -> list[str]:
    doc = server.get(f"/v1/models/{name}/metadata").json()
    signature = doc["metadata"]["signature_def"]["signatureDef"]["serving_default"]
    return [d["size"] for d in signature["inputs"]["x"]["tensorShape"]["dim"]]
