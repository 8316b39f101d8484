"""Compiled blobs (core.runtime.blobs): written by a concurrent host, imported by the next
instance instead of compiling, found in OVS_COMPILED_CACHE or next to the model, keyed so a
changed model or setting misses, and a broken blob falls back to a compile. Host profile:
THROUGHPUT streams on concurrent hosts, LATENCY otherwise, plugin_config always wins."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from core.config import Settings, parse_model_config
from core.runtime import blobs
from core.runtime.blobs import BlobCache
from core.runtime.host import Host
from core.serving.model import ModelVersion
from core.serving.registry import ModelManager
from demo.models import save, scaler


def version(
    folder: Path,
    cache: Path,
    concurrent: bool = False,
    folders: tuple[str, ...] = (),
    **options: object,
) -> ModelVersion:
    """A loaded version as a manager with these settings builds it: a concurrent host exports
    blobs to `cache`, every host reads them from `folders` (OVS_COMPILED_CACHE) first."""
    config = parse_model_config({"name": "m", "base_path": str(folder.parent), **options}, "m")
    cache_value = BlobCache(str(cache), folders, export=concurrent)
    loaded = ModelVersion(config, 1, folder, cache_value, host=Host(concurrent))
    loaded.load()
    assert loaded.available, loaded.status
    return loaded


def wait_for_blob(cache: Path, pattern: str = "*") -> Path:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        blobs = list((cache / "blobs").glob(f"{pattern}.blob"))
        if blobs:
            return blobs[0]
        time.sleep(0.05)
    raise AssertionError("no blob written")


def first_load(tmp_path: Path, factor: float) -> tuple[Path, ModelVersion]:
    """A scaler by `factor` saved as version 1 of model m, and loaded (its blob key known)."""
    folder = tmp_path / "m" / "1"
    save(scaler(factor), folder)
    return folder, version(folder, tmp_path / "cache")


def run(loaded: ModelVersion) -> np.ndarray:
    return loaded.infer({"x": np.ones((2, 4), np.float32)})["y"]


def test_concurrent_host_writes_a_blob_the_next_instance_imports(tmp_path: Path) -> None:
    save(scaler(3.0), tmp_path / "m" / "1")
    first = version(tmp_path / "m" / "1", tmp_path / "cache", concurrent=True)
    assert first.timings["blob_hit"] == 0.0
    run(first)  # the export waits for the first request
    wait_for_blob(tmp_path / "cache", first.blob_key)  # an adaptive version writes two
    second = version(tmp_path / "m" / "1", tmp_path / "cache", concurrent=True)
    assert second.timings["blob_hit"] == 1.0
    np.testing.assert_array_equal(run(second), run(first))


def test_export_waits_for_the_first_request_or_an_idle_spell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cold start's first answer does not share the CPU with the export."""
    save(scaler(3.0), tmp_path / "m" / "1")
    served = version(tmp_path / "m" / "1", tmp_path / "served", concurrent=True)
    time.sleep(0.5)
    assert not list((tmp_path / "served" / "blobs").glob("*.blob"))
    run(served)
    wait_for_blob(tmp_path / "served")
    monkeypatch.setattr(blobs, "EXPORT_WAIT_S", 0.3)
    version(
        tmp_path / "m" / "1", tmp_path / "idle", concurrent=True
    )  # never asked: exports after the wait
    wait_for_blob(tmp_path / "idle")


def test_a_version_retired_before_its_export_writes_no_blob(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its export thread ends at the retirement, and with it the last hold on the model."""
    save(scaler(3.0), tmp_path / "m" / "1")
    monkeypatch.setattr(blobs, "EXPORT_WAIT_S", 1.0)
    before = set(threading.enumerate())
    loaded = version(tmp_path / "m" / "1", tmp_path / "cache", concurrent=True)
    (export,) = [t for t in set(threading.enumerate()) - before if t.name.startswith("export-")]
    loaded.retire(grace=0)
    export.join(timeout=0.5)
    assert not export.is_alive()
    time.sleep(1.0)  # past the wait, when the export would have run
    assert not list((tmp_path / "cache").glob("blobs/*.blob"))


def test_one_request_hosts_read_blobs_but_do_not_write(tmp_path: Path) -> None:
    save(scaler(3.0), tmp_path / "m" / "1")
    loaded = version(tmp_path / "m" / "1", tmp_path / "cache")
    baked = blobs.write(loaded._compiled, loaded.blob_key, tmp_path / "baked")
    time.sleep(0.2)
    assert not (tmp_path / "cache" / "blobs").exists()
    again = version(tmp_path / "m" / "1", tmp_path / "other-cache", folders=(str(baked.parent),))
    assert again.timings["blob_hit"] == 1.0
    np.testing.assert_array_equal(run(again), np.full((2, 4), 3.0, np.float32))


def test_blob_next_to_the_model_is_used(tmp_path: Path) -> None:
    folder, loaded = first_load(tmp_path, 5.0)
    blobs.write(loaded._compiled, loaded.blob_key, folder / blobs.BLOB_FOLDER)
    again = version(folder, tmp_path / "cache2")
    assert again.timings["blob_hit"] == 1.0
    np.testing.assert_array_equal(run(again), np.full((2, 4), 5.0, np.float32))


def test_a_retired_version_unmaps_its_blob(tmp_path: Path) -> None:
    """The blob's disk space comes back once the version ends (its file may be deleted)."""
    folder, loaded = first_load(tmp_path, 5.0)
    blob = blobs.write(loaded._compiled, loaded.blob_key, tmp_path / "baked")
    imported = version(folder, tmp_path / "cache2", folders=(str(blob.parent),))
    assert imported.timings["blob_hit"] == 1.0
    assert str(blob) in Path("/proc/self/maps").read_text()
    imported.retire(grace=0)
    gc.collect()
    assert str(blob) not in Path("/proc/self/maps").read_text()


def test_broken_blob_falls_back_to_a_compile(tmp_path: Path) -> None:
    folder, loaded = first_load(tmp_path, 2.0)
    (folder / blobs.BLOB_FOLDER).mkdir()
    (folder / blobs.BLOB_FOLDER / f"{loaded.blob_key}.blob").write_bytes(b"junk" * 99)
    again = version(folder, tmp_path / "cache")
    assert again.timings["blob_hit"] == 0.0
    np.testing.assert_array_equal(run(again), np.full((2, 4), 2.0, np.float32))


def test_key_follows_model_files_settings_and_options(tmp_path: Path) -> None:
    folder = tmp_path / "m" / "1"
    save(scaler(2.0), folder)
    base = version(folder, tmp_path / "c").blob_key
    assert version(folder, tmp_path / "c", nireq=3).blob_key == base  # not a compile input
    assert version(folder, tmp_path / "c", shape="(3,4)").blob_key != base
    assert (
        version(folder, tmp_path / "c", plugin_config={"PERFORMANCE_HINT": "THROUGHPUT"}).blob_key
        != base
    )
    save(scaler(7.0), folder)  # same topology, other weights
    assert version(folder, tmp_path / "c").blob_key != base


def test_host_profile_picks_the_hint_and_plugin_config_wins(tmp_path: Path) -> None:
    folder = tmp_path / "m" / "1"
    save(scaler(2.0), folder)
    assert (
        version(folder, tmp_path / "c", concurrent=True)._compile_config()["PERFORMANCE_HINT"]
        == "THROUGHPUT"
    )
    pinned = version(
        folder, tmp_path / "c", concurrent=True, plugin_config={"PERFORMANCE_HINT": "LATENCY"}
    )
    assert pinned._compile_config()["PERFORMANCE_HINT"] == "LATENCY"
    assert version(folder, tmp_path / "c")._compile_config() == {"PERFORMANCE_HINT": "LATENCY"}


def test_settings_concurrent_and_blob_folders_from_env() -> None:
    assert not Settings.from_env({}).concurrent
    assert Settings.from_env({"OVS_CONCURRENT": "1"}).concurrent
    assert Settings.from_env({"OVS_COMPILED_CACHE": "/a:/b"}).compiled_cache == ("/a", "/b")


@pytest.mark.parametrize(
    ("env", "export"),
    [
        ({"OVS_CONCURRENT": "1"}, True),
        ({"OVS_CONCURRENT": "1", "K_SERVICE": "svc"}, False),  # Cloud Run: its disk is memory
        ({"OVS_CONCURRENT": "1", "K_SERVICE": "svc", "OVS_EXPORT_BLOBS": "1"}, True),
        ({"OVS_EXPORT_BLOBS": "0", "OVS_CONCURRENT": "1"}, False),
    ],
)
def test_which_hosts_write_blobs(tmp_path: Path, env: dict[str, str], export: bool) -> None:
    from core.serving.registry import ModelManager

    save(scaler(3.0), tmp_path / "m" / "1")
    settings = Settings.from_env(
        {
            **env,
            "OVS_MODEL_NAME": "m",
            "OVS_MODEL_PATH": str(tmp_path / "m"),
            "OVS_CACHE_DIR": str(tmp_path / "cache"),
        }
    )
    before = set(threading.enumerate())
    manager = ModelManager.start(settings)
    try:
        exports = [t for t in set(threading.enumerate()) - before if t.name.startswith("export-")]
        assert len(exports) == int(export)
        run(manager.models["m"].versions[1])
        if export:
            wait_for_blob(tmp_path / "cache")
    finally:  # no throughput compile (and its export thread) later, inside the next case
        manager.models["m"].retire()


def test_two_managers_in_one_process_each_use_their_own_blob_cache_and_host(
    tmp_path: Path,
) -> None:
    """A manager's blob folders, export and host are values its versions get, not process
    state the last manager built sets: `baked` serves the first manager's model from a blob
    while the second, concurrent, compiles (THROUGHPUT) and writes its own."""
    folder = tmp_path / "m" / "1"
    save(scaler(3.0), folder)
    plain = version(folder, tmp_path / "c")
    baked = blobs.write(plain._compiled, plain.blob_key, tmp_path / "baked")
    common = {"model_name": "m", "model_path": str(folder.parent), "lazy_load": True}
    reading = Settings(cache_dir=str(tmp_path / "a"), compiled_cache=(str(baked.parent),), **common)
    writing = Settings(cache_dir=str(tmp_path / "b"), concurrent=True, **common)
    first, second = ModelManager(reading), ModelManager(writing)
    for manager, settings in ((first, reading), (second, writing)):
        manager.apply(settings.server_config())
    imported, compiled = first.get("m"), second.get("m")  # lazy: both load now
    assert imported.timings["blob_hit"] == 1.0
    assert imported._compile_config() == {"PERFORMANCE_HINT": "LATENCY"}
    assert compiled.timings["blob_hit"] == 0.0
    assert compiled._compile_config() == {"PERFORMANCE_HINT": "THROUGHPUT"}
    run(compiled)  # its export waits for the first request
    wait_for_blob(tmp_path / "b")
    np.testing.assert_array_equal(run(imported), run(compiled))
    assert not (tmp_path / "a" / "blobs").exists()


EXIT_SCRIPT = """
import sys
import threading

import numpy as np
import openvino as ov
from openvino import opset13 as ops

from core.runtime.blobs import BlobCache

width = 8 * 1024 * 1024  # 32 MB of weights: the export is still writing when the script ends
x = ops.parameter([1, width], np.float32, name="x")
y = ops.add(x, ops.constant(np.random.default_rng(0).random((1, width), np.float32)))
compiled = ov.Core().compile_model(ov.Model([ops.result(y)], [x]), "CPU")
started = threading.Event()
started.set()  # the version's first answer: the export may run
BlobCache(sys.argv[1], export=True).save_later(compiled, "big", "", started)
"""


def test_a_blob_export_in_flight_at_exit_completes_with_no_partial_file(tmp_path: Path) -> None:
    """The interpreter's exit waits for an export under way (core.runtime.background): the
    blob is whole and imports, and no temporary file is left behind."""
    done = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT, str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    written = sorted(p.name for p in (tmp_path / "cache" / "blobs").iterdir())
    assert written == ["big.blob"]
    compiled = ov.Core().import_model(
        (tmp_path / "cache" / "blobs" / "big.blob").read_bytes(), "CPU"
    )
    assert [p.get_any_name() for p in compiled.inputs] == ["x"]


def test_weights_overwritten_in_place_between_samples_miss_the_hosts_own_blob(
    tmp_path: Path,
) -> None:
    """The key samples a large weight file; an overwrite of the same size that changes only
    bytes between the samples (a retrained small layer) must not import the blob this host
    wrote for the old weights: the new weights are served."""
    folder = tmp_path / "m" / "1"
    weights = np.random.default_rng(0).normal(0, 1, (1024, 512)).astype(np.float32)
    x = ops.parameter([1, 1024], np.float32, name="x")
    x.output(0).set_names({"x"})
    y = ops.matmul(x, ops.constant(weights), False, False)
    y.output(0).set_names({"y"})
    save(ov.Model([y], [x], "weights"), folder)
    ones = np.ones((1, 1024), np.float32)
    first = version(folder, tmp_path / "cache", concurrent=True)
    before = first.infer({"x": ones})["y"]
    wait_for_blob(tmp_path / "cache", blobs.own_name(first.blob_key, first.blob_stamp))
    again = version(folder, tmp_path / "cache", concurrent=True)
    assert again.timings["blob_hit"] == 1.0  # files unchanged: the blob imports
    bin_file = folder / "model.bin"
    data = bytearray(bin_file.read_bytes())
    start = blobs.SAMPLE_BYTES * 2  # between the first two samples (2 MiB: 33 KB apart)
    rows = np.frombuffer(bytes(data[start : start + 4096]), np.float32) * 3
    data[start : start + 4096] = rows.tobytes()
    bin_file.write_bytes(bytes(data))  # same name, same size
    second = version(folder, tmp_path / "cache", concurrent=True)
    assert second.timings["blob_hit"] == 0.0
    assert not np.array_equal(second.infer({"x": ones})["y"], before)
