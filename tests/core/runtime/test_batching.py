"""Server-side dynamic batching: concurrent requests that arrive within the window run as one
inference, every caller gets exactly its own rows, shapes that cannot be stacked never are,
and a model that cannot be batched says so in its status."""

from __future__ import annotations

import json
import queue
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import orjson
import pytest

from core import metrics
from core.api import App, make_request
from core.config import BatchingConfig, Settings, parse_config
from core.errors import ConfigError
from core.runtime.batching import Batcher
from core.serving.registry import ModelManager
from demo.models import scaler
from tests.core.helpers import save_ir, write_config
from tests.reliability.helpers import metric_value

WINDOW = {"max_batch_size": 4, "window_us": 200_000}  # wide: the threads surely meet in it


def _app(tmp_path: Path, name: str, shape: tuple[int, ...], batching: object) -> App:
    save_ir(scaler(2.0, shape), tmp_path / name / "1")
    config = write_config(
        tmp_path / "config.json",
        [{"name": name, "base_path": str(tmp_path / name), "dynamic_batching": batching}],
    )
    settings = Settings(config_path=str(config), concurrent=True)
    return App(ModelManager.start(settings), settings)


def _predict(app: App, name: str, x: np.ndarray) -> tuple[int, object]:
    body = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "shape": list(x.shape),
                    "datatype": "FP32",
                    "data": x.reshape(-1).tolist(),
                }
            ]
        }
    )
    response = app.handle(make_request("POST", f"/v2/models/{name}/infer", body))
    return response.status, json.loads(response.body)


def _at_once(app: App, name: str, inputs: list[np.ndarray]) -> list[tuple[int, object]]:
    results: list[tuple[int, object]] = [(0, None)] * len(inputs)
    start = threading.Barrier(len(inputs))

    def send(index: int) -> None:
        start.wait()
        results[index] = _predict(app, name, inputs[index])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(inputs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


def _rows(doc: object) -> np.ndarray:
    (output,) = doc["outputs"]  # type: ignore[index]
    return np.array(output["data"], np.float32).reshape(output["shape"])


def _batches(name: str) -> tuple[float, float]:
    text = metrics.exposition()[0].decode()
    return (
        metric_value(text, "ov_serverless_batch_size_count", name=name, version="1"),
        metric_value(text, "ov_serverless_batch_size_sum", name=name, version="1"),
    )


def test_concurrent_requests_share_one_inference_and_get_their_own_rows(tmp_path: Path) -> None:
    app = _app(tmp_path, "batched", (-1, 4), WINDOW)
    inputs = [np.full((1, 4), i, np.float32) for i in range(4)]
    results = _at_once(app, "batched", inputs)
    for x, (status, doc) in zip(inputs, results, strict=True):
        assert status == 200, doc
        np.testing.assert_array_equal(_rows(doc), x * 2)
    count, rows = _batches("batched")
    assert rows == 4
    assert count < 4  # fewer inferences than requests


def test_requests_of_several_rows_are_split_back_by_their_size(tmp_path: Path) -> None:
    app = _app(tmp_path, "rows", (-1, 4), {"max_batch_size": 8, "window_us": 200_000})
    inputs = [np.arange(4 * n, dtype=np.float32).reshape(n, 4) + 100 * n for n in (1, 2, 3)]
    for x, (status, doc) in zip(inputs, _at_once(app, "rows", inputs), strict=True):
        assert status == 200, doc
        np.testing.assert_array_equal(_rows(doc), x * 2)


def test_shapes_that_cannot_stack_run_separately(tmp_path: Path) -> None:
    app = _app(tmp_path, "ragged", (-1, -1), WINDOW)
    inputs = [np.ones((1, 4), np.float32), np.ones((1, 5), np.float32) * 3]
    for x, (status, doc) in zip(inputs, _at_once(app, "ragged", inputs), strict=True):
        assert status == 200, doc
        np.testing.assert_array_equal(_rows(doc), x * 2)


def test_a_request_bigger_than_max_batch_size_runs_alone(tmp_path: Path) -> None:
    app = _app(tmp_path, "big", (-1, 4), {"max_batch_size": 2, "window_us": 0})
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    status, doc = _predict(app, "big", x)
    assert status == 200, doc
    np.testing.assert_array_equal(_rows(doc), x * 2)
    text = metrics.exposition()[0].decode()  # its wait for an InferRequest is still counted
    assert metric_value(text, "ovms_wait_for_infer_req_time_us_count", name="big", version="1") == 1


def test_bad_input_is_still_rejected_per_request(tmp_path: Path) -> None:
    app = _app(tmp_path, "checked", (-1, 4), WINDOW)
    status, doc = _predict(app, "checked", np.ones((1, 3), np.float32))
    assert status == 400
    assert "Invalid input shape" in doc["error"]  # type: ignore[index]
    status, _ = _predict(app, "checked", np.ones((1, 4), np.float32))
    assert status == 200


def test_a_fixed_batch_model_fails_to_load_with_the_reason(tmp_path: Path) -> None:
    app = _app(tmp_path, "fixed", (1, 4), WINDOW)
    response = app.handle(make_request("GET", "/v1/models/fixed"))
    (version,) = json.loads(response.body)["model_version_status"]
    assert version["status"]["error_code"] == "UNKNOWN"
    assert "dynamic_batching needs a dynamic dim 0" in version["status"]["error_message"]


def test_retiring_a_batched_version_stops_its_threads(tmp_path: Path) -> None:
    app = _app(tmp_path, "retired", (-1, 4), WINDOW)
    version = app.manager.get("retired", None)
    before = {t.name for t in threading.enumerate()}
    assert any(name.startswith("batcher-retired") for name in before)
    version.retire(grace=0)
    assert not any(t.name.startswith("batcher-retired") for t in threading.enumerate())


@pytest.mark.parametrize(
    "value,message",
    [
        ({"max_batch_size": 1}, "max_batch_size"),
        ({"window_us": -5}, "window_us"),
        ({"max_batch": 4}, "max_batch"),
        ([4], "dynamic_batching"),
    ],
)
def test_bad_batching_config_is_a_config_error(value: object, message: str) -> None:
    doc = {
        "model_config_list": [
            {"config": {"name": "m", "base_path": "/m", "dynamic_batching": value}}
        ]
    }
    with pytest.raises(ConfigError, match=message):
        parse_config(json.dumps(doc).encode())


def test_batching_config_from_file_and_env() -> None:
    doc = {
        "model_config_list": [
            {"config": {"name": "m", "base_path": "/m", "dynamic_batching": {"max_batch_size": 16}}}
        ]
    }
    (model,) = parse_config(json.dumps(doc).encode()).models
    assert model.dynamic_batching == BatchingConfig(16, 2000)
    settings = Settings.from_env(
        {"OVS_MODEL_PATH": "/m", "OVS_DYNAMIC_BATCHING": '{"max_batch_size": 4, "window_us": 500}'}
    )
    (model,) = settings.server_config().models
    assert model.dynamic_batching == BatchingConfig(4, 500)


def test_stateful_models_cannot_be_batched() -> None:
    doc = {
        "model_config_list": [
            {"config": {"name": "m", "base_path": "/m", "stateful": True, "dynamic_batching": {}}}
        ]
    }
    with pytest.raises(ConfigError, match="stateful"):
        parse_config(json.dumps(doc).encode())


def test_a_model_whose_rows_do_not_map_to_outputs_fails_every_caller_clearly(
    tmp_path: Path,
) -> None:
    """[-1,4] -> flattened [-1]: dim 0 is dynamic but is not the batch; stacking two requests
    cannot be split back, so both callers get the reason instead of someone else's rows."""
    from openvino import Model
    from openvino import opset13 as ops

    x = ops.parameter([-1, 4], np.float32, name="x")
    x.output(0).set_names({"x"})
    y = ops.reshape(x, ops.constant(np.array([-1], np.int64)), special_zero=False)
    y.output(0).set_names({"y"})
    save_ir(Model([y], [x], "flat"), tmp_path / "flat" / "1")
    config = write_config(
        tmp_path / "config.json",
        [{"name": "flat", "base_path": str(tmp_path / "flat"), "dynamic_batching": WINDOW}],
    )
    settings = Settings(config_path=str(config), concurrent=True)
    app = App(ModelManager.start(settings), settings)
    results = _at_once(app, "flat", [np.ones((1, 4), np.float32)] * 2)
    for status, doc in results:
        assert status == 412, doc
        assert "Dynamic batching" in doc["error"]  # type: ignore[index]
    status, doc = _predict(app, "flat", np.ones((1, 4), np.float32))
    assert status == 200, doc  # alone, it still serves


def test_batching_flag_of_the_cli(tmp_path: Path) -> None:
    from handlers import cli

    args = cli._parser().parse_args(
        [
            "invoke",
            "GET",
            "/v1/config",
            "--model_name",
            "m",
            "--model_path",
            str(tmp_path),
            "--dynamic_batching",
            '{"max_batch_size": 4, "window_us": 0}',
        ]
    )
    (model,) = cli._settings(args).server_config().models
    assert model.dynamic_batching == BatchingConfig(4, 0)


def test_string_requests_of_different_lengths_batch_and_get_their_own_rows(tmp_path: Path) -> None:
    """String inputs of different element lengths are one batch (their numpy bytes dtypes
    differ only in width), and each caller gets its own strings back."""
    from openvino import Model, Type
    from openvino import opset13 as ops

    text = ops.parameter([-1, 1], Type.string, name="text")
    text.output(0).set_names({"text"})
    twice = ops.concat([text, text], 1)
    twice.output(0).set_names({"twice"})
    save_ir(Model([twice], [text], "twice"), tmp_path / "twice" / "1")
    config = write_config(
        tmp_path / "config.json",
        [{"name": "twice", "base_path": str(tmp_path / "twice"), "dynamic_batching": WINDOW}],
    )
    settings = Settings(config_path=str(config), concurrent=True)
    app = App(ModelManager.start(settings), settings)
    words = ["a", "bcd", "efghij", "k" * 40]
    results: list[object] = [None] * len(words)
    start = threading.Barrier(len(words))

    def send(index: int) -> None:
        body = orjson.dumps(
            {
                "inputs": [
                    {"name": "text", "shape": [1, 1], "datatype": "BYTES", "data": [words[index]]}
                ]
            }
        )
        start.wait()
        response = app.handle(make_request("POST", "/v2/models/twice/infer", body))
        results[index] = (response.status, json.loads(response.body))

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(words))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    for word, (status, doc) in zip(words, results, strict=True):  # type: ignore[misc]
        assert status == 200, doc
        assert doc["outputs"][0]["data"] == [word, word]
    count, rows = _batches("twice")
    assert rows == 4
    assert count < 4


# -- a gathered crowd keeps its batches full (linger) ----------------------------------------

INFERENCE_S = 0.1  # each inference of the slow scaler below
THINK_S = 0.01  # a client's turn between its answer and its next request (an HTTP round trip)
LINGER = 0.5  # of the last inference: 50 ms, well over THINK_S


class _SlowScaler:
    """The real scaler on a real InferRequest, held INFERENCE_S long (a big model's time), that
    records each inference's rows and thread."""

    def __init__(self) -> None:
        compiled = ov.Core().compile_model(scaler(2.0), "CPU")
        self.pool: queue.Queue[ov.InferRequest] = queue.Queue()
        self.pool.put(compiled.create_infer_request())
        self.rows: list[int] = []
        self.threads: list[threading.Thread] = []

    def __call__(self, request: ov.InferRequest, feed: dict[str, np.ndarray]) -> dict[str, Any]:
        time.sleep(INFERENCE_S)
        self.rows.append(len(feed["x"]))
        self.threads.append(threading.current_thread())
        return {"y": request.infer(feed, share_inputs=False)[0].copy()}


def _gathering(linger: float) -> tuple[Batcher, _SlowScaler]:
    model = _SlowScaler()
    batcher = Batcher(BatchingConfig(4, 0), model.pool, model, "gather", workers=1, linger=linger)
    return batcher, model


def _clients(batcher: Batcher, count: int, calls: int) -> list[list[np.ndarray]]:
    """`count` clients at once, each sending `calls` requests one after the other."""
    answers: list[list[np.ndarray]] = [[] for _ in range(count)]
    start = threading.Barrier(count)

    def client(index: int) -> None:
        start.wait()
        for call in range(calls):
            x = np.full((1, 4), 10 * index + call, np.float32)
            answers[index].append(batcher.infer({"x": x})["y"])
            time.sleep(THINK_S)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return answers


@pytest.mark.parametrize(("linger", "full"), [(LINGER, True), (0.0, False)])
def test_a_crowd_waits_for_the_callers_it_answered_and_runs_full_batches(
    linger: float, full: bool
) -> None:
    """Without a linger, 4 clients that take a round trip to send again split into a request
    alone and a batch of 3, forever; with it, every batch after the first two runs all 4."""
    batcher, model = _gathering(linger)
    try:
        answers = _clients(batcher, 4, 5)
    finally:
        batcher.close()
    for index, replies in enumerate(answers):
        expected = [np.full((1, 4), 2 * (10 * index + call), np.float32) for call in range(5)]
        np.testing.assert_array_equal(np.concatenate(replies), np.concatenate(expected))
    assert model.rows[:2] == [1, 3]  # the first alone, the others gathered behind it
    assert sum(model.rows) == 20
    assert (set(model.rows[2:]) == {4}) is full, model.rows


def test_a_caller_alone_never_waits_for_a_crowd() -> None:
    """A lone client runs each request at once on its own thread, and so does a request that
    comes after a crowd's linger has passed."""
    batcher, model = _gathering(LINGER)
    try:
        _clients(batcher, 1, 3)
        assert model.rows == [1, 1, 1]
        assert model.threads == [model.threads[0]] * 3
        assert not model.threads[0].name.startswith("batch-")  # the client's, not a worker
        _clients(batcher, 4, 2)
        time.sleep(INFERENCE_S * LINGER * 3)
        runs = len(model.rows)
        caller = threading.current_thread()
        batcher.infer({"x": np.ones((1, 4), np.float32)})
        assert model.threads[runs:] == [caller]
    finally:
        batcher.close()
