"""batch_size "auto" / shape "auto" with OVMS's semantics: the metadata shows the static shape the
version is compiled for; a request of another batch (or shape) reloads the version for it, beside
the serving one, then is answered; concurrent requests needing the same reload cause one reload;
reloads show in /metrics. Explicit dynamic dimensions (-1, ranges) never reload."""

from __future__ import annotations

import json
import logging
import re
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.api import App, make_request
from core.config import Settings
from core.serving.model import ModelVersion
from core.serving.registry import ModelManager
from core.serving.servable import State
from demo import models
from tests.core.helpers import classifier, save_ir, write_config


@pytest.fixture
def app(tmp_path: Path) -> App:
    save_ir(models.scaler(2.0, shape=(1, 4)), tmp_path / "scaler" / "1")
    save_ir(classifier(batch=1), tmp_path / "classifier" / "1")
    config = write_config(
        tmp_path / "config.json",
        [
            {"name": "batch_auto", "base_path": str(tmp_path / "scaler"), "batch_size": "auto"},
            {"name": "shape_auto", "base_path": str(tmp_path / "scaler"), "shape": "auto"},
            {
                "name": "shape_map_auto",
                "base_path": str(tmp_path / "scaler"),
                "shape": {"x": "auto"},
            },
            {"name": "image_auto", "base_path": str(tmp_path / "classifier"), "shape": "auto"},
            {"name": "batch_any", "base_path": str(tmp_path / "scaler"), "batch_size": -1},
            {"name": "batch_range", "base_path": str(tmp_path / "scaler"), "batch_size": "1:8"},
        ],
    )
    settings = Settings(config_path=str(config), cache_dir=str(tmp_path / "cache"))
    served = App(ModelManager.start(settings), settings)
    _baseline.clear()  # counters live for the process; each test counts from here
    _baseline.update({name: _reload_count(served, name) for name in served.manager.models})
    return served


def call(app: App, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else b""
    response = app.handle(make_request(method, path, data, {}))
    text = response.body.decode()
    return response.status, (json.loads(text) if text.startswith(("{", "[")) else text)


def input_shape(app: App, name: str) -> list[int]:
    status, doc = call(app, "GET", f"/v2/models/{name}")
    assert status == 200, doc
    return list(doc["inputs"][0]["shape"])


def predict(app: App, name: str, data: np.ndarray) -> tuple[int, Any]:
    return call(app, "POST", f"/v1/models/{name}:predict", {"instances": data.tolist()})


_baseline: dict[str, float] = {}


def _reload_count(app: App, name: str) -> float:
    status, text = call(app, "GET", "/metrics")
    assert status == 200
    found = re.search(
        rf'^ov_serverless_auto_reloads{{name="{name}",version="1"}} (\S+)$', text, re.M
    )
    return float(found.group(1)) if found else 0.0


def reloads(app: App, name: str) -> float:
    """Reloads of `name` since the test's server started, as /metrics counts them."""
    return _reload_count(app, name) - _baseline[name]


def rows(batch: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-5, 5, (batch, 4)).astype(np.float32)


def test_batch_auto_metadata_shows_the_static_batch(app: App) -> None:
    assert input_shape(app, "batch_auto") == [1, 4]
    status, doc = call(app, "GET", "/v1/models/batch_auto/metadata")
    assert status == 200
    dims = doc["metadata"]["signature_def"]["signatureDef"]["serving_default"]["inputs"]["x"]
    assert [int(d["size"]) for d in dims["tensorShape"]["dim"]] == [1, 4]


def test_batch_auto_reloads_for_another_batch_then_answers(app: App) -> None:
    data = rows(3)
    status, doc = predict(app, "batch_auto", data)
    assert status == 200, doc
    assert np.allclose(doc["predictions"], data * 2)
    assert input_shape(app, "batch_auto") == [3, 4]
    assert reloads(app, "batch_auto") == 1
    status, doc = call(app, "GET", "/v1/models/batch_auto")
    assert [v["state"] for v in doc["model_version_status"]] == ["AVAILABLE"]
    status, text = call(app, "GET", "/metrics")
    assert re.search(
        r'^ov_serverless_cold_start_seconds\{stage="auto_reload_s",'
        r'name="batch_auto",version="1"\} [0-9.e-]+$',
        text,
        re.M,
    ), text
    predict(app, "batch_auto", rows(3, seed=1))  # same batch: no reload
    assert reloads(app, "batch_auto") == 1
    status, doc = predict(app, "batch_auto", rows(1))  # back to one: reloads again
    assert status == 200 and reloads(app, "batch_auto") == 2
    assert input_shape(app, "batch_auto") == [1, 4]


def test_concurrent_requests_needing_one_reload_cause_one(app: App) -> None:
    clients = 8
    start = threading.Barrier(clients)
    answers: list[tuple[int, Any, np.ndarray]] = []

    def client(seed: int) -> None:
        data = rows(5, seed)
        start.wait()
        status, doc = predict(app, "batch_auto", data)
        answers.append((status, doc, data))

    threads = [threading.Thread(target=client, args=(seed,)) for seed in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert len(answers) == clients
    for status, doc, data in answers:
        assert status == 200, doc
        assert np.allclose(doc["predictions"], data * 2)
    assert reloads(app, "batch_auto") == 1
    assert input_shape(app, "batch_auto") == [5, 4]


def test_no_request_fails_while_batches_alternate(app: App) -> None:
    """Each switch reloads; requests running on the replaced version finish there."""
    failures: list[Any] = []

    def client(batch: int) -> None:
        for round_ in range(6):
            data = rows(batch, seed=round_)
            status, doc = predict(app, "batch_auto", data)
            if status != 200 or not np.allclose(doc["predictions"], data * 2):
                failures.append((batch, status, doc))

    threads = [threading.Thread(target=client, args=(batch,)) for batch in (1, 2, 1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert failures == []
    assert reloads(app, "batch_auto") >= 1
    served = app.manager.models["batch_auto"].versions
    assert list(served) == [1] and served[1].status.state is State.AVAILABLE


def test_replaced_version_drains_then_ends(app: App) -> None:
    old = app.manager.get("batch_auto")
    with old.serving():  # a request still running on it
        status, _ = predict(app, "batch_auto", rows(2))
        assert status == 200
        assert old.status.state is State.UNLOADING
        assert old._compiled is not None  # still able to finish what it runs
    deadline = threading.Event()
    for _ in range(100):
        if old.status.state is State.END:
            break
        deadline.wait(0.1)
    assert old.status.state is State.END


def test_shape_auto_reloads_for_another_shape(app: App) -> None:
    assert input_shape(app, "shape_auto") == [1, 4]
    for shape in ((2, 3), (1, 4, 2), (2, 3)):
        data = np.random.default_rng(1).uniform(0, 1, shape).astype(np.float32)
        status, doc = predict(app, "shape_auto", data)
        assert status == 200, doc
        assert np.allclose(doc["predictions"], data * 2)
        assert input_shape(app, "shape_auto") == list(shape)
    assert reloads(app, "shape_auto") == 3  # (2,3) again after (1,4,2): a reload too


def test_per_input_shape_auto(app: App) -> None:
    data = np.ones((3, 2), np.float32)
    status, doc = predict(app, "shape_map_auto", data)
    assert status == 200 and doc == {"predictions": (data * 2).tolist()}
    assert input_shape(app, "shape_map_auto") == [3, 2]


def test_shape_auto_with_a_shape_the_model_cannot_take(app: App) -> None:
    """A failed reload answers 400; the version keeps serving its shape, and says so."""
    bad = np.zeros((1, 5, 32, 32), np.float32)  # the classifier's conv takes 3 channels
    status, doc = predict(app, "image_auto", bad)
    assert status == 400, doc
    assert "could not be reloaded for the request's shape: input (1,5,32,32)" in doc["error"]
    assert input_shape(app, "image_auto") == [1, 3, 224, 224]
    status, doc = call(app, "GET", "/v1/models/image_auto")
    (version,) = doc["model_version_status"]
    assert version["state"] == "AVAILABLE"
    assert "Reload for input (1,5,32,32) failed" in version["status"]["error_message"]
    good = np.zeros((2, 3, 32, 32), np.float32)
    status, doc = predict(app, "image_auto", good)
    assert status == 200 and np.asarray(doc["predictions"]).shape == (2, 1000)


def test_batch_auto_does_not_reload_for_a_wrong_row_size(app: App) -> None:
    status, doc = predict(app, "batch_auto", np.ones((2, 5), np.float32))
    assert status == 400
    assert doc["error"] == "Invalid input batch size - Expected: 1; Actual: 2; input name: x"
    assert reloads(app, "batch_auto") == 0


@pytest.mark.parametrize(("name", "shape"), [("batch_any", [-1, 4]), ("batch_range", [-1, 4])])
def test_explicit_dynamic_batches_never_reload(app: App, name: str, shape: list[int]) -> None:
    status, doc = call(app, "GET", f"/v2/models/{name}")
    assert doc["inputs"][0]["shape"] == shape
    for batch in (1, 3, 8):
        data = rows(batch)
        status, doc = predict(app, name, data)
        assert status == 200 and np.allclose(doc["predictions"], data * 2)
    assert reloads(app, name) == 0


def test_status_says_a_reload_is_under_way(app: App) -> None:
    """While the version compiles for the new shape, the serving one stays AVAILABLE and its
    status says why; once replaced, the status is plain OK."""
    seen: set[str] = set()
    done = threading.Event()

    def reload() -> None:
        try:
            predict(app, "image_auto", np.zeros((2, 3, 224, 224), np.float32))
        finally:
            done.set()

    thread = threading.Thread(target=reload)
    thread.start()
    while not done.is_set():
        _, doc = call(app, "GET", "/v1/models/image_auto")
        (version,) = doc["model_version_status"]
        assert version["state"] == "AVAILABLE"
        seen.add(version["status"]["error_message"])
    thread.join()
    assert "Reloading for input (2,3,224,224) (auto); this version serves meanwhile" in seen, seen
    _, doc = call(app, "GET", "/v1/models/image_auto")
    assert doc["model_version_status"][0]["status"] == {"error_code": "OK", "error_message": "OK"}


def test_auto_logs_ovms_deprecation_warning_once(caplog: pytest.LogCaptureFixture) -> None:
    from core.config import notices, parse_config

    notices._noticed.clear()
    doc = {
        "model_config_list": [
            {"config": {"name": "b", "base_path": "/m/b", "batch_size": "auto"}},
            {"config": {"name": "s", "base_path": "/m/s", "shape": {"x": "auto"}}},
        ]
    }
    with caplog.at_level(logging.WARNING, logger="ov_serverless.config"):
        for _ in range(2):  # a reload parses the file again
            parse_config(json.dumps(doc).encode())
    assert caplog.text.count("Batch size auto is deprecated. Use model dynamic shapes") == 1
    assert caplog.text.count("Shape auto is deprecated. Use model dynamic shapes") == 1


@pytest.mark.parametrize(
    "auto", [{"batch_size": "auto"}, {"shape": "auto"}, {"shape": {"x": "auto"}}]
)
def test_a_stateful_model_cannot_be_auto(auto: dict[str, Any]) -> None:
    from core.config import parse_config
    from core.errors import ConfigError

    doc = {
        "model_config_list": [
            {"config": {"name": "s", "base_path": "/m/s", "stateful": True, **auto}}
        ]
    }
    with pytest.raises(
        ConfigError,
        match="Dynamic shape and dynamic batch size are not supported for stateful models",
    ):
        parse_config(json.dumps(doc).encode())


def test_dynamic_batching_with_auto_is_refused() -> None:
    from core.config import parse_config
    from core.errors import ConfigError

    doc = {
        "model_config_list": [
            {
                "config": {
                    "name": "d",
                    "base_path": "/m/d",
                    "batch_size": "auto",
                    "dynamic_batching": {},
                }
            }
        ]
    }
    with pytest.raises(
        ConfigError,
        match=r"dynamic_batching: needs a dynamic batch dimension; "
        r"use batch_size -1 \(or a range\), not auto",
    ):
        parse_config(json.dumps(doc).encode())


def test_a_model_removed_while_it_reloads_for_a_shape_stays_removed(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A config reload that removes the model while an auto reload compiles: the fitted
    version is not published into the removed model (it served on, listed AVAILABLE)."""
    done = threading.Event()
    removed = threading.Event()  # the auto reload's compile starts once the model is removed
    answers: list[int] = []
    load = ModelVersion.load

    def load_after_the_removal(version: ModelVersion) -> None:
        if threading.current_thread() is thread:
            removed.wait(30)
        load(version)

    monkeypatch.setattr(ModelVersion, "load", load_after_the_removal)

    def reload_for_batch_2() -> None:
        try:
            answers.append(predict(app, "image_auto", np.zeros((2, 3, 224, 224), np.float32))[0])
        finally:
            done.set()

    thread = threading.Thread(target=reload_for_batch_2)
    thread.start()
    while not done.is_set():
        _, doc = call(app, "GET", "/v1/models/image_auto")
        if "Reloading" in doc["model_version_status"][0]["status"]["error_message"]:
            break
    assert not done.is_set(), "the reload ended before the config changed: no race to test"
    path = Path(app.manager.settings.config_path or "")
    config = json.loads(path.read_text())
    config["model_config_list"] = [
        entry for entry in config["model_config_list"] if entry["config"]["name"] != "image_auto"
    ]
    path.write_text(json.dumps(config))
    assert call(app, "POST", "/v1/config/reload")[0] == 201
    removed.set()
    thread.join()
    assert answers == [200]  # the request that asked for the reload is answered
    _, doc = call(app, "GET", "/v1/models/image_auto")
    assert {v["state"] for v in doc["model_version_status"]} <= {"UNLOADING", "END"}, doc
    status, _ = predict(app, "image_auto", np.zeros((1, 3, 224, 224), np.float32))
    assert status == 404
