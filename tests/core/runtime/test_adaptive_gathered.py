"""Adaptive execution with one compile (core.runtime.adaptive, gathered versions): on a concurrent
host an untuned model whose inputs take one row compiles once, LATENCY, taking 1..GATHER rows,
and still serves the signature it declares; a lone request runs alone ("latency"), requests that
arrive while an inference runs are gathered into one ("batched") and each gets exactly its own
rows; a model whose rows interact is never gathered; its blob imports gathered on a new
instance, and a plain blob never does. Concurrency is forced by holding the version's
InferRequests while the clients' requests queue."""

from __future__ import annotations

import logging
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from core import metrics
from core.config import Settings
from core.errors import InvalidInputError
from core.runtime import adaptive, blobs
from core.serving.model import ModelVersion
from core.serving.registry import ModelManager
from core.serving.servable import State
from demo.models import save
from tests.core.helpers import classifier, image_input, save_ir
from tests.core.runtime.test_adaptive import load, scrape, served
from tests.reload.helpers import (
    app_sender,
    put_version,
    start_app,
    wait_for,
    write_config_atomic,
)
from tests.reload.helpers import predict as predict_factor

# Gathered rows run other kernels than a lone row (bf16 on CPUs that have it): as close as the
# row check asks (core.runtime.adaptive.interaction), not bit-equal.
RTOL = adaptive.REDUCED_RTOL


def close(gathered: np.ndarray, alone: np.ndarray) -> None:
    scale = float(np.abs(alone).max())
    np.testing.assert_allclose(gathered, alone, rtol=RTOL, atol=RTOL * scale)


def checked(version: ModelVersion) -> None:
    """Wait for the row check to pass (gathering starts)."""
    wait_for(lambda: version.variants == ("latency", "batched"), "the row check", timeout_s=60)


@contextmanager
def held(version: ModelVersion) -> Iterator[None]:
    """Hold every InferRequest of the version: its requests queue meanwhile."""
    pool: queue.Queue[ov.InferRequest] = version._pool
    taken = [pool.get(timeout=30) for _ in range(adaptive.GATHER_REQUESTS)]
    try:
        yield
    finally:
        for request in taken:
            pool.put(request)


def at_once(version: ModelVersion, feeds: list[dict[str, np.ndarray]]) -> list[dict[str, Any]]:
    """Send `feeds` while the version's InferRequests are held, and release them once all
    wait in its batcher: they run as one inference (GATHER of them at most)."""
    answers: list[dict[str, Any]] = [{} for _ in feeds]
    batcher = version._batcher
    assert batcher is not None

    def client(index: int) -> None:
        answers[index] = version.infer(feeds[index])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(feeds))]
    with held(version):
        for thread in threads:
            thread.start()
        wait_for(lambda: batcher.waiting == len(feeds), "the queued requests")
    for thread in threads:
        thread.join(timeout=30)
    return answers


def images(seeds: range) -> list[dict[str, np.ndarray]]:
    return [{"input": image_input(seed)} for seed in seeds]


def probabilities(answers: list[dict[str, Any]]) -> list[np.ndarray]:
    return [answer["probabilities"] for answer in answers]


def batch_count(name: str, version: int = 1) -> int:
    """Inferences of the version's batcher (ov_serverless_batch_size_count)."""
    return sum(metrics.BATCH_SIZE.labels(name, str(version)).counts)


@pytest.fixture
def model_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "clf" / "1"
    save_ir(classifier(), folder)
    return folder


def test_a_gatherable_model_compiles_once_and_serves_the_signature_it_declares(
    model_folder: Path,
) -> None:
    version = load(model_folder, "g-once")
    assert version.gathered and version._compiled is not None
    compiled_dim = version._compiled.inputs[0].get_partial_shape()[0]
    assert compiled_dim == ov.Dimension(1, adaptive.GATHER)
    assert version.inputs["input"].dims == ((1, 1), (3, 3), (224, 224), (224, 224))
    assert version.outputs["probabilities"].dims == ((1, 1), (1000, 1000))
    assert version.variants == ("latency",)  # before the row check
    version.infer({"input": image_input(0)})
    checked(version)
    first, second = version._first, version._second
    assert first is not None and second is not None
    assert second.compiled is first.compiled and second.pool is first.pool  # one compile
    assert "throughput_compile_s" not in version.timings
    with pytest.raises(InvalidInputError, match="Expected: 1; Actual: 2; input name: input"):
        version.infer({"input": image_input(0, batch=2)})


def test_a_lone_request_runs_alone_and_concurrent_ones_are_gathered_into_one_inference(
    model_folder: Path,
) -> None:
    version = load(model_folder, "g-crowd")
    lone = [version.infer(feed)["probabilities"] for feed in images(range(4))]
    checked(version)
    assert (served("g-crowd", 1, "latency"), served("g-crowd", 1, "batched")) == (4, 0)
    inferences, rows = batch_count("g-crowd"), metrics.BATCH_SIZE.labels("g-crowd", "1").sum
    again = version.infer(images(range(1))[0])["probabilities"]  # alone, through the batcher
    np.testing.assert_array_equal(again, lone[0])
    gathered = probabilities(at_once(version, images(range(4))))
    assert (served("g-crowd", 1, "latency"), served("g-crowd", 1, "batched")) == (5, 4)
    assert batch_count("g-crowd") == inferences + 2  # the four requests ran as one inference
    assert metrics.BATCH_SIZE.labels("g-crowd", "1").sum == rows + 1 + 4
    for mine, alone in zip(gathered, lone, strict=True):
        assert mine.shape == (1, 1000)
        close(mine, alone)
    assert 'variant="batched"} 4.0' in scrape("g-crowd")


def test_clients_at_random_moments_each_get_their_own_rows(model_folder: Path) -> None:
    version = load(model_folder, "g-random")
    expected = [version.infer(feed)["probabilities"] for feed in images(range(8))]
    checked(version)
    start = threading.Barrier(8)
    answers: dict[int, list[np.ndarray]] = {}

    def client(seed: int) -> None:
        start.wait()
        feed = {"input": image_input(seed)}
        answers[seed] = [version.infer(feed)["probabilities"] for _ in range(10)]

    threads = [threading.Thread(target=client, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert served("g-random", 1, "latency") + served("g-random", 1, "batched") == 8 + 80
    for seed, results in answers.items():
        for result in results:
            close(result, expected[seed])


def test_a_one_request_host_keeps_its_static_latency_compile_and_blob_key(
    model_folder: Path,
) -> None:
    single = load(model_folder, "g-lambda", concurrent=False)
    single.infer({"input": image_input(0)})
    assert not single.gathered and single.variants == ("fixed",)
    assert single._compiled is not None
    assert single._compiled.inputs[0].get_partial_shape().is_static
    assert str(single._compiled.get_property("PERFORMANCE_HINT")) == "LATENCY"
    gathered = load(model_folder, "g-serve")
    assert gathered.blob_key == blobs.extended(single.blob_key, adaptive.GATHER_KEY)


@pytest.mark.parametrize(
    "options",
    [
        {"plugin_config": {"PERFORMANCE_HINT": "LATENCY"}},
        {"plugin_config": {"NUM_STREAMS": 1}},
        {"batch_size": 1},
        {"shape": "(1,3,224,224)"},
        {"layout": "NCHW"},
    ],
    ids=["hint", "streams", "batch_size", "shape", "layout"],
)
def test_a_tuned_or_shaped_config_is_not_gathered(
    model_folder: Path, options: dict[str, Any]
) -> None:
    """An explicit hint keeps one compile; an explicit shape keeps its OVMS meaning (the
    two-compile scheme)."""
    name = f"g-config-{next(iter(options))}-{len(str(options))}"
    version = load(model_folder, name, **options)
    assert not version.gathered
    assert version._compiled is not None
    assert version._compiled.inputs[0].get_partial_shape().is_static
    version.infer({"input": image_input(0)})
    wanted = ("fixed",) if "plugin_config" in options else ("latency", "throughput")
    wait_for(lambda: version.variants == wanted, f"variants {wanted}", timeout_s=60)
    assert served(name, 1, "batched") == 0


def test_a_host_told_not_to_gather_compiles_a_one_row_model_twice(model_folder: Path) -> None:
    """OVS_GATHER=0 (`--gather false`): a concurrent host's manager gives the one-row
    classifier the two-compile scheme (LATENCY alone, THROUGHPUT among others), and a
    lone request still runs on the LATENCY compile."""
    common = {"model_name": "g-off", "model_path": str(model_folder.parent)}
    settings = Settings.from_env({"OVS_GATHER": "0"}, defaults={"concurrent": True, **common})
    assert (settings.concurrent, settings.gather) == (True, False)
    manager = ModelManager(settings)
    manager.apply(settings.server_config())
    version = manager.get("g-off")
    assert isinstance(version, ModelVersion) and not version.gathered
    assert version._compiled is not None
    assert version._compiled.inputs[0].get_partial_shape().is_static
    version.infer({"input": image_input(0)})
    wanted = ("latency", "throughput")
    wait_for(lambda: version.variants == wanted, f"variants {wanted}", timeout_s=60)
    assert (served("g-off", 1, "latency"), served("g-off", 1, "batched")) == (1, 0)


ECHO_SCRIPT = """
import sys
from pathlib import Path

import numpy as np

from tests.core.runtime.test_adaptive import load
from tests.core.runtime.test_adaptive_gathered import at_once, checked

version = load(Path(sys.argv[1]), "g-echo")
assert version.gathered
rng = np.random.default_rng(0)
rows = [rng.random((1, 40, 60, 3), dtype=np.float32) for _ in range(4)]
for step in range(60):
    x = rows[step % 4]
    assert np.array_equal(version.infer({"image": x})["pixels"], x), step
    if step == 0:
        checked(version)
    if step % 10 == 0:
        answers = at_once(version, [{"image": r} for r in rows])
        assert all(np.array_equal(a["pixels"], r) for a, r in zip(answers, rows)), step
print("echoed")
"""


def test_a_gathered_model_that_passes_its_input_through_serves_without_crashing(
    tmp_path: Path,
) -> None:
    """An echo (a Convert to the input's own type) compiled with a dynamic dim 0: OpenVINO's
    CPU plugin crashed the process within a few dozen requests when the request's array was
    shared with the inference; gathered compiles copy it (core.runtime.ov_core)."""
    image = ops.parameter([1, 40, 60, 3], np.float32, name="image")
    image.output(0).set_names({"image"})
    pixels = ops.convert(image, ov.Type.f32)
    pixels.output(0).set_names({"pixels"})
    folder = tmp_path / "echo" / "1"
    save_ir(ov.Model([pixels], [image], "echo"), folder)
    done = subprocess.run(
        [sys.executable, "-c", ECHO_SCRIPT, str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])},
    )
    assert (done.returncode, done.stdout.strip()) == (0, "echoed"), done.stderr[-2000:]


def rows_meet(kind: str) -> ov.Model:
    """x [1,4] -> y [1,4] whose dim 0 follows x's, yet whose rows interact once gathered:
    x minus its mean over dim 0, or a softmax over dim 0. Alone, y is 0 or 1 everywhere."""
    x = ops.parameter([1, 4], np.float32, name="x")
    x.output(0).set_names({"x"})
    if kind == "minus-mean":
        y = ops.subtract(x, ops.reduce_mean(x, ops.constant(np.array([0], np.int64)), True))
    else:
        y = ops.softmax(x, 0)
    y.output(0).set_names({"y"})
    return ov.Model([y], [x], kind)


@pytest.mark.parametrize("kind", ["minus-mean", "softmax-0"])
def test_a_model_whose_rows_interact_is_never_gathered_and_answers_as_alone(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    save(rows_meet(kind), tmp_path / kind / "1")
    name = f"g-meet-{kind}"
    with caplog.at_level(logging.WARNING, "ov_serverless.model"):
        version = load(tmp_path / kind / "1", name)
        feeds = [{"x": np.arange(4, dtype=np.float32)[None] + seed} for seed in range(8)]
        lone = [version.infer(feed)["y"] for feed in feeds]
        wait_for(lambda: version.variants == ("latency", "throughput"), "the fallback", 60)
    assert "rows of one inference interact" in caplog.text
    assert version._batcher is None
    start = threading.Barrier(8)
    answers: dict[int, list[np.ndarray]] = {}

    def client(index: int) -> None:
        start.wait()
        answers[index] = [version.infer(feeds[index])["y"] for _ in range(10)]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for index, results in answers.items():
        for result in results:
            np.testing.assert_array_equal(result, lone[index])
    with version.serving():  # another request in flight: the throughput variant answers
        np.testing.assert_array_equal(version.infer(feeds[0])["y"], lone[0])
    assert served(name, 1, "batched") == 0 and batch_count(name) == 0
    assert served(name, 1, "throughput") >= 1
    assert version.export_blobs(tmp_path / "baked") == []  # a gathered blob would not serve


def wait_for_blob(folder: Path, name: str) -> Path:
    path = folder / "blobs" / f"{name}.blob"
    wait_for(path.is_file, f"the blob {name}", timeout_s=30)
    return path


def gathers_own_rows(version: ModelVersion, lone: Callable[[int], np.ndarray]) -> None:
    checked(version)
    for seed, mine in zip(range(4), probabilities(at_once(version, images(range(4)))), strict=True):
        close(mine, lone(seed))


def test_a_gathered_blob_imports_gathered_without_reading_the_model(
    model_folder: Path, tmp_path: Path
) -> None:
    version = load(model_folder, "g-blob")  # its blob goes to <tmp>/clf/cache/blobs
    version.infer({"input": image_input(0)})
    checked(version)
    written = wait_for_blob(model_folder.parent / "cache", version.blob_key)
    exported = version.export_blobs(tmp_path / "baked")
    assert [path.name for path in exported] == [written.name]

    imported = load(model_folder, "g-blob2", folders=(str(tmp_path / "baked"),))
    assert imported.timings["blob_hit"] == 1.0 and imported.timings["read_s"] == 0.0
    assert imported.gathered and imported.blob_key == version.blob_key
    assert imported.inputs == version.inputs and imported.outputs == version.outputs
    lone = {
        seed: imported.infer(feed)["probabilities"] for seed, feed in enumerate(images(range(4)))
    }
    gathers_own_rows(imported, lone.__getitem__)


def test_a_plain_blob_never_imports_gathered(model_folder: Path, tmp_path: Path) -> None:
    """A one-request host's blob (the static LATENCY compile) on a concurrent host: imported
    under its plain key, served with the two-compile scheme."""
    single = load(model_folder, "g-plain", concurrent=False)
    (plain,) = single.export_blobs(tmp_path / "plain")
    imported = load(model_folder, "g-plain2", folders=(str(tmp_path / "plain"),))
    assert imported.timings["blob_hit"] == 1.0
    assert not imported.gathered and imported.blob_key == plain.stem
    assert imported.inputs == single.inputs
    lone = imported.infer({"input": image_input(0)})["probabilities"]
    wait_for(lambda: imported.variants == ("latency", "throughput"), "the throughput variant", 60)
    with imported.serving():
        close(imported.infer({"input": image_input(0)})["probabilities"], lone)


def test_retiring_a_gathered_version_stops_its_batcher(model_folder: Path) -> None:
    version = load(model_folder, "g-retire")
    version.infer({"input": image_input(0)})
    checked(version)
    batcher = version._batcher
    assert batcher is not None
    version.retire(grace=0)
    assert version.status.state is State.END and version.variants == ()
    assert version._batcher is None and not batcher._thread.is_alive()


def test_reload_and_new_versions_are_gathered_too(tmp_path: Path) -> None:
    put_version(tmp_path / "g", 1, factor=2.0, shape=(1, 4))
    config = write_config_atomic(tmp_path / "config.json", [{"name": "g-app", "base_path": "g"}])
    app = start_app(
        Settings(config_path=str(config), cache_dir=str(tmp_path / "cache"), concurrent=True)
    )
    try:
        send = app_sender(app)
        assert predict_factor(send, "g-app") == (200, 2.0)
        first = app.manager.models["g-app"].versions[1]
        assert first.gathered
        checked(first)
        status, doc = send("GET", "/v2/models/g-app")
        assert status == 200 and [i["shape"] for i in doc["inputs"]] == [[1, 4]], doc
        assert [o["shape"] for o in doc["outputs"]] == [[1, 4]]
        status, doc = send("POST", "/v1/models/g-app:predict", {"instances": [[1, 2, 3, 4]] * 2})
        assert status == 400 and "Expected: 1; Actual: 2" in doc["error"], doc

        put_version(tmp_path / "g", 2, factor=5.0, shape=(1, 4))
        assert send("POST", "/v1/config/reload")[0] in (200, 201)
        wait_for(
            lambda: (
                2 in app.manager.models["g-app"].versions
                and app.manager.models["g-app"].versions[2].available
            ),
            "version 2",
        )
        assert predict_factor(send, "g-app") == (200, 5.0)
        newer = app.manager.models["g-app"].versions[2]
        assert newer.gathered
        checked(newer)
        feeds = [{"x": np.full((1, 4), row, np.float32)} for row in range(4)]
        for feed, answer in zip(feeds, at_once(newer, feeds), strict=True):
            np.testing.assert_array_equal(answer["y"], feed["x"] * 5)
        assert served("g-app", 2, "batched") == 4
        wait_for(lambda: first.status.state is State.END, "version 1 retired", 30)
        assert first.variants == ()
    finally:
        for served_model in app.manager.models.values():
            for version in served_model.versions.values():
                version.retire(grace=0)
