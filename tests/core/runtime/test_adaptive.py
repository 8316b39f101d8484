"""Adaptive execution (core.runtime.adaptive), two-compile scheme: on a concurrent host an untuned
version whose model cannot be gathered (here a classifier whose output is averaged over dim 0;
gathered versions: test_adaptive_gathered.py) serves a lone request on its LATENCY-compiled
variant and requests among others on its THROUGHPUT variant (compiled in the background after
the first answer); an explicit hint, a one-request host, a stateful or dynamically batched model
keep one compile; reloads and retirements keep both variants consistent; both give the same
answers. Routing is observed through the ov_serverless_variant_requests metric."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from core import metrics
from core.config import Settings, parse_model_config
from core.runtime import blobs as blobs_module
from core.runtime.blobs import BlobCache
from core.runtime.host import Host
from core.serving.model import ModelVersion
from core.serving.servable import State
from core.serving.stateful import StatefulModelVersion
from demo.models import save, scaler
from tests.core.helpers import CLASSES, classifier, image_input, save_ir
from tests.reload.helpers import (
    app_sender,
    put_version,
    start_app,
    wait_for,
    write_config_atomic,
)
from tests.reload.helpers import predict as predict_factor


def load(
    folder: Path,
    name: str = "m",
    cls: type[ModelVersion] = ModelVersion,
    concurrent: bool = True,
    folders: tuple[str, ...] = (),
    **options: Any,
) -> ModelVersion:
    """A loaded version as a manager builds it on a concurrent host (by default), its blobs
    read from `folders` (OVS_COMPILED_CACHE) first."""
    config = parse_model_config({"name": name, "base_path": str(folder.parent), **options}, name)
    blobs = BlobCache(str(folder.parent / "cache"), folders, export=concurrent)
    version = cls(config, 1, folder, blobs, host=Host(concurrent))
    version.load()
    assert version.available, version.status
    return version


def served(name: str, version: int, variant: str) -> float:
    """What /metrics says: inferences of `variant` for the model version."""
    value: float = metrics.VARIANT_REQUESTS.labels(name, str(version), variant).value
    return value


def scrape(name: str) -> str:
    text = metrics.render([metrics.VARIANT_REQUESTS]).decode()
    return "\n".join(line for line in text.splitlines() if f'name="{name}"' in line)


def both_variants(version: ModelVersion) -> None:
    wait_for(
        lambda: version.variants == ("latency", "throughput"),
        "the throughput variant",
        timeout_s=60,
    )


def hint(version: ModelVersion, variant: int) -> str:
    compiled = (version._first, version._second)[variant]
    assert compiled is not None
    return str(compiled.compiled.get_property("PERFORMANCE_HINT"))


def run(version: ModelVersion, seed: int = 0) -> np.ndarray:
    return version.infer({"input": image_input(seed)})["probabilities"]


def folded_classifier(seed: int = 0) -> ov.Model:
    """The test classifier (input [1,3,224,224] -> probabilities [1,1000]) with its answer
    averaged over dim 0 (kept): the same answer for its one row, but an output whose dim 0
    stays 1 whatever the input's, so it cannot be gathered. (A batch of 1 baked into a Reshape
    would not do: OpenVINO's reshape rewrites such a Reshape to follow the input's batch.)"""
    rng = np.random.default_rng(seed)
    data = ops.parameter([1, 3, 224, 224], np.float32, name="input")
    data.output(0).set_names({"input"})
    kernel = ops.constant(rng.normal(0, 0.1, (16, 3, 3, 3)).astype(np.float32))
    conv = ops.convolution(data, kernel, [2, 2], [1, 1], [1, 1], [1, 1])
    pooled = ops.reduce_mean(ops.relu(conv), ops.constant(np.array([2, 3], np.int64)), False)
    weights = ops.constant(rng.normal(0, 0.5, (16, CLASSES)).astype(np.float32))
    probs = ops.softmax(ops.matmul(pooled, weights, False, False), 1)
    folded = ops.reduce_mean(probs, ops.constant(np.array([0], np.int64)), True)
    folded.output(0).set_names({"probabilities"})
    return ov.Model([folded], [data], "folded")


@pytest.fixture
def model_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "clf" / "1"
    save_ir(folded_classifier(), folder)
    return folder


def test_a_lone_request_runs_on_latency_and_one_among_others_on_throughput(
    model_folder: Path,
) -> None:
    version = load(model_folder, "ad-lone")
    assert version.variants == ("latency",)  # the first answer does not wait for the second
    assert hint(version, 0) == "LATENCY"
    lone = run(version)
    assert served("ad-lone", 1, "latency") == 1
    both_variants(version)  # compiled once the first request was answered
    assert hint(version, 1) == "THROUGHPUT"
    np.testing.assert_array_equal(run(version), lone)
    assert (served("ad-lone", 1, "latency"), served("ad-lone", 1, "throughput")) == (2, 0)
    with version.serving():  # another request in flight
        crowded = run(version)
    assert (served("ad-lone", 1, "latency"), served("ad-lone", 1, "throughput")) == (2, 1)
    np.testing.assert_allclose(crowded, lone, rtol=1e-5, atol=1e-6)
    assert 'variant="latency"} 2.0' in scrape("ad-lone")
    assert 'variant="throughput"} 1.0' in scrape("ad-lone")


def test_concurrent_clients_are_served_by_the_throughput_variant(model_folder: Path) -> None:
    version = load(model_folder, "ad-crowd")
    expected = [run(version, seed) for seed in range(8)]
    both_variants(version)
    before = served("ad-crowd", 1, "throughput")
    start = threading.Barrier(8)
    answers: dict[int, list[np.ndarray]] = {}

    def client(seed: int) -> None:
        start.wait()
        answers[seed] = [run(version, seed) for _ in range(15)]

    threads = [threading.Thread(target=client, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert served("ad-crowd", 1, "throughput") > before
    for seed, results in answers.items():
        for result in results:  # whichever variant answered
            np.testing.assert_allclose(result, expected[seed], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "plugin_config",
    [
        {"PERFORMANCE_HINT": "THROUGHPUT"},
        {"PERFORMANCE_HINT": "LATENCY"},
        {"NUM_STREAMS": 2},
        {"CPU_THROUGHPUT_STREAMS": "CPU_THROUGHPUT_AUTO"},  # OVMS's legacy key
        {"CPU_THROUGHPUT_STREAMS": 1},
    ],
)
def test_an_explicit_hint_or_stream_count_disables_adaptation(
    model_folder: Path, plugin_config: dict[str, Any]
) -> None:
    name = f"ad-tuned-{len(str(plugin_config))}-{next(iter(plugin_config.values()))}"
    version = load(model_folder, name, plugin_config=plugin_config)
    for _ in range(2):
        run(version)
    version._export_gate.wait(5)  # the moment a second variant would compile
    with version.serving():
        run(version)
    assert version.variants == ("fixed",)
    assert served(name, 1, "fixed") == 3 and served(name, 1, "throughput") == 0
    compiled = version._compiled
    assert compiled is not None
    wanted = plugin_config.get("PERFORMANCE_HINT")
    if wanted is not None:
        assert str(compiled.get_property("PERFORMANCE_HINT")) == wanted
    if "NUM_STREAMS" in plugin_config:
        assert int(compiled.get_property("NUM_STREAMS")) == 2


def test_a_one_request_host_keeps_latency_only(model_folder: Path) -> None:
    version = load(model_folder, "ad-lambda", concurrent=False)
    run(version)
    assert version.variants == ("fixed",)
    assert hint(version, 0) == "LATENCY"


def test_stateful_and_batched_models_keep_one_variant(tmp_path: Path) -> None:
    save(scaler(2.0, (1, 4)), tmp_path / "ad-state" / "1")
    stateful = load(tmp_path / "ad-state" / "1", "ad-state", StatefulModelVersion, stateful=True)
    save(scaler(2.0), tmp_path / "ad-one-batched" / "1")
    batched = load(
        tmp_path / "ad-one-batched" / "1",
        "ad-one-batched",
        dynamic_batching={"max_batch_size": 4, "window_us": 100},
    )
    batched.infer({"x": np.ones((1, 4), np.float32)})
    assert stateful.variants == ("fixed",) and batched.variants == ("fixed",)
    assert served("ad-one-batched", 1, "fixed") == 1


def test_retiring_releases_both_variants(model_folder: Path) -> None:
    version = load(model_folder, "ad-retire")
    run(version)
    both_variants(version)
    version.retire(grace=0)
    assert version.status.state is State.END
    assert version.variants == ()


def test_a_version_retired_before_its_second_compile_never_gets_one(
    model_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = load(model_folder, "ad-early")
    version.retire(grace=0)  # retiring opens the gate the background compile waits on
    with version._second_lock:  # the background compile, if it ran, has finished
        pass
    assert version.variants == ()


def test_auto_batch_reload_and_new_versions_adapt_too(tmp_path: Path) -> None:
    put_version(tmp_path / "auto", 1, factor=2.0, shape=(1, 4))
    config = write_config_atomic(
        tmp_path / "config.json", [{"name": "ad-auto", "base_path": "auto", "batch_size": "auto"}]
    )
    app = start_app(
        Settings(config_path=str(config), cache_dir=str(tmp_path / "cache"), concurrent=True)
    )
    try:
        send = app_sender(app)
        assert predict_factor(send, "ad-auto") == (200, 2.0)
        first = app.manager.models["ad-auto"].versions[1]
        both_variants(first)
        status, doc = send("POST", "/v1/models/ad-auto:predict", {"instances": [[1, 2, 3, 4]] * 3})
        assert status == 200, doc
        refitted = app.manager.models["ad-auto"].versions[1]
        assert refitted is not first and refitted.fit.batch == 3
        assert first.variants == () or first.status.state >= State.UNLOADING
        both_variants(refitted)
        with refitted.serving():
            status, doc = send(
                "POST", "/v1/models/ad-auto:predict", {"instances": [[1, 2, 3, 4]] * 3}
            )
        assert status == 200 and doc["predictions"][0] == [2.0, 4.0, 6.0, 8.0]
        assert served("ad-auto", 1, "throughput") >= 1

        put_version(tmp_path / "auto", 2, factor=5.0, shape=(1, 4))
        assert send("POST", "/v1/config/reload")[0] in (200, 201)
        wait_for(
            lambda: (
                2 in app.manager.models["ad-auto"].versions
                and app.manager.models["ad-auto"].versions[2].available
            ),
            "version 2",
        )
        assert predict_factor(send, "ad-auto") == (200, 5.0)
        newer = app.manager.models["ad-auto"].versions[2]
        both_variants(newer)
        wait_for(lambda: refitted.status.state is State.END, "version 1 retired", 30)
        assert refitted.variants == ()
    finally:
        for served_model in app.manager.models.values():
            for version in served_model.versions.values():
                version.retire(grace=0)


def mapped_blobs(folder: Path) -> set[str]:
    """The .blob files under `folder` that this process has memory-mapped (/proc/self/maps)."""
    root = str(folder.resolve())
    lines = Path("/proc/self/maps").read_text().splitlines()
    paths = (line.split(maxsplit=5)[-1] for line in lines)
    return {path for path in paths if path.startswith(root) and path.endswith(".blob")}


def test_one_blob_serves_both_variants_and_a_new_instance_maps_it_once(
    model_folder: Path, tmp_path: Path
) -> None:
    version = load(model_folder, "ad-blobs")
    blobs = version.export_blobs(tmp_path / "baked")
    assert [blob.name for blob in blobs] == [f"{version.blob_key}.blob"]
    imported = load(model_folder, "ad-blobs2", folders=(str(tmp_path / "baked"),))
    assert imported.timings["blob_hit"] == 1.0
    lone = run(imported)
    both_variants(imported)
    first, second = imported._first, imported._second
    assert first is not None and second is not None
    assert second.blob is not None and second.blob is first.blob  # imported, not compiled
    assert hint(imported, 1) == "THROUGHPUT"  # the blob imported with the variant's own hint
    assert len(mapped_blobs(tmp_path)) == 1  # its weights' pages are resident once
    with imported.serving():
        np.testing.assert_allclose(run(imported), lone, rtol=1e-5, atol=1e-6)


def test_a_blob_the_throughput_hint_cannot_import_leaves_a_compiled_throughput_variant(
    model_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = load(model_folder, "ad-reimport")
    version.export_blobs(tmp_path / "baked")
    real = blobs_module.reimport

    def latency_only(
        core: Any, data: Any, device: str, properties: dict[str, Any], name: str
    ) -> Any:
        if properties.get("PERFORMANCE_HINT") == "THROUGHPUT":
            return None  # as when the plugin refuses the blob with this hint
        return real(core, data, device, properties, name)

    monkeypatch.setattr(blobs_module, "reimport", latency_only)
    imported = load(model_folder, "ad-reimport2", folders=(str(tmp_path / "baked"),))
    assert imported.timings["blob_hit"] == 1.0
    lone = run(imported)
    both_variants(imported)
    second = imported._second
    assert second is not None and second.blob is None  # compiled from the model instead
    assert hint(imported, 1) == "THROUGHPUT"
    with imported.serving():
        np.testing.assert_allclose(run(imported), lone, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["batch-2", "any-batch", "folded"])
def test_a_model_that_cannot_be_gathered_keeps_two_compiles(tmp_path: Path, kind: str) -> None:
    """Dim 0 of 2, a dynamic dim 0, or an output whose dim 0 does not follow the input's: no
    gathered compile, the throughput variant serves requests among others, with the lone
    request's answers."""
    model = {
        "batch-2": classifier(batch=2),
        "any-batch": classifier(batch=None),
        "folded": folded_classifier(),
    }[kind]
    save_ir(model, tmp_path / kind / "1")
    name = f"ad-not-gathered-{kind}"
    version = load(tmp_path / kind / "1", name)
    assert not version.gathered
    x = {"input": image_input(3, batch=2 if kind == "batch-2" else 1)}
    lone = version.infer(x)["probabilities"]
    both_variants(version)
    with version.serving():
        crowded = version.infer(x)["probabilities"]
    np.testing.assert_allclose(crowded, lone, rtol=1e-5, atol=1e-6)
    assert (served(name, 1, "throughput"), served(name, 1, "batched")) == (1, 0)
