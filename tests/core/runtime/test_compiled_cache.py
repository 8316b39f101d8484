"""Compiled blobs (core.runtime.compiled_cache): written by a concurrent host, imported by the next
instance instead of compiling, found in OVS_COMPILED_CACHE or next to the model, keyed so a
changed model or setting misses, and a broken blob falls back to a compile. Host profile:
THROUGHPUT streams on concurrent hosts, LATENCY otherwise, plugin_config always wins."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from core.config import Settings, parse_model_config
from core.runtime import compiled_cache
from core.serving.model import ModelVersion
from demo.models import save, scaler


@pytest.fixture(autouse=True)
def profile() -> Iterator[None]:
    yield
    compiled_cache.configure(False)


def version(folder: Path, cache: Path, **options: object) -> ModelVersion:
    config = parse_model_config({"name": "m", "base_path": str(folder.parent), **options}, "m")
    loaded = ModelVersion(config, 1, folder, str(cache))
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


def run(loaded: ModelVersion) -> np.ndarray:
    return loaded.infer({"x": np.ones((2, 4), np.float32)})["y"]


def test_concurrent_host_writes_a_blob_the_next_instance_imports(tmp_path: Path) -> None:
    save(scaler(3.0), tmp_path / "m" / "1")
    compiled_cache.configure(True)
    first = version(tmp_path / "m" / "1", tmp_path / "cache")
    assert first.timings["blob_hit"] == 0.0
    run(first)  # the export waits for the first request
    wait_for_blob(tmp_path / "cache", first.blob_key)  # an adaptive version writes two
    second = version(tmp_path / "m" / "1", tmp_path / "cache")
    assert second.timings["blob_hit"] == 1.0
    np.testing.assert_array_equal(run(second), run(first))


def test_export_waits_for_the_first_request_or_an_idle_spell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cold start's first answer does not share the CPU with the export."""
    save(scaler(3.0), tmp_path / "m" / "1")
    compiled_cache.configure(True)
    served = version(tmp_path / "m" / "1", tmp_path / "served")
    time.sleep(0.5)
    assert not list((tmp_path / "served" / "blobs").glob("*.blob"))
    run(served)
    wait_for_blob(tmp_path / "served")
    monkeypatch.setattr(compiled_cache, "EXPORT_WAIT_S", 0.3)
    version(tmp_path / "m" / "1", tmp_path / "idle")  # never asked: exports after the wait
    wait_for_blob(tmp_path / "idle")


def test_a_version_retired_before_its_export_writes_no_blob(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its export thread ends at the retirement, and with it the last hold on the model."""
    save(scaler(3.0), tmp_path / "m" / "1")
    compiled_cache.configure(True)
    monkeypatch.setattr(compiled_cache, "EXPORT_WAIT_S", 1.0)
    before = set(threading.enumerate())
    loaded = version(tmp_path / "m" / "1", tmp_path / "cache")
    (export,) = [t for t in set(threading.enumerate()) - before if t.name.startswith("export-")]
    loaded.retire(grace=0)
    export.join(timeout=0.5)
    assert not export.is_alive()
    time.sleep(1.0)  # past the wait, when the export would have run
    assert not list((tmp_path / "cache").glob("blobs/*.blob"))


def test_one_request_hosts_read_blobs_but_do_not_write(tmp_path: Path) -> None:
    save(scaler(3.0), tmp_path / "m" / "1")
    compiled_cache.configure(False)
    loaded = version(tmp_path / "m" / "1", tmp_path / "cache")
    baked = compiled_cache.write(loaded._compiled, loaded.blob_key, tmp_path / "baked")
    time.sleep(0.2)
    assert not (tmp_path / "cache" / "blobs").exists()
    compiled_cache.configure(False, [str(baked.parent)])
    again = version(tmp_path / "m" / "1", tmp_path / "other-cache")
    assert again.timings["blob_hit"] == 1.0
    np.testing.assert_array_equal(run(again), np.full((2, 4), 3.0, np.float32))


def test_blob_next_to_the_model_is_used(tmp_path: Path) -> None:
    folder = tmp_path / "m" / "1"
    save(scaler(5.0), folder)
    loaded = version(folder, tmp_path / "cache")
    compiled_cache.write(loaded._compiled, loaded.blob_key, folder / compiled_cache.BLOB_FOLDER)
    again = version(folder, tmp_path / "cache2")
    assert again.timings["blob_hit"] == 1.0
    np.testing.assert_array_equal(run(again), np.full((2, 4), 5.0, np.float32))


def test_a_retired_version_unmaps_its_blob(tmp_path: Path) -> None:
    """The blob's disk space comes back once the version ends (its file may be deleted)."""
    folder = tmp_path / "m" / "1"
    save(scaler(5.0), folder)
    loaded = version(folder, tmp_path / "cache")
    blob = compiled_cache.write(loaded._compiled, loaded.blob_key, tmp_path / "baked")
    compiled_cache.configure(False, [str(blob.parent)])
    imported = version(folder, tmp_path / "cache2")
    assert imported.timings["blob_hit"] == 1.0
    assert str(blob) in Path("/proc/self/maps").read_text()
    imported.retire(grace=0)
    gc.collect()
    assert str(blob) not in Path("/proc/self/maps").read_text()


def test_broken_blob_falls_back_to_a_compile(tmp_path: Path) -> None:
    folder = tmp_path / "m" / "1"
    save(scaler(2.0), folder)
    loaded = version(folder, tmp_path / "cache")
    (folder / compiled_cache.BLOB_FOLDER).mkdir()
    (folder / compiled_cache.BLOB_FOLDER / f"{loaded.blob_key}.blob").write_bytes(b"junk" * 99)
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
    compiled_cache.configure(True)
    assert version(folder, tmp_path / "c")._compile_config()["PERFORMANCE_HINT"] == "THROUGHPUT"
    pinned = version(folder, tmp_path / "c", plugin_config={"PERFORMANCE_HINT": "LATENCY"})
    assert pinned._compile_config()["PERFORMANCE_HINT"] == "LATENCY"
    compiled_cache.configure(False)
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
