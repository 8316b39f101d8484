"""Compiled blobs stored next to a version in a bucket (s3 / gs / az on real emulators): a new
instance downloads the model's files and only the blob with its own key, imports it instead of
compiling, and a blob added later does not make the version look changed."""

from __future__ import annotations

from pathlib import Path

from core import compiled_cache
from core.api import App
from core.config import Settings
from core.model import ModelVersion
from core.storage import BLOB_FOLDER, open_repository
from tests.storage.helpers import Store
from tests.storage.serving import predict, put_scaler, scaled, start_app

PREFIX = "repo/scaler"


def _settings(store: Store, cache_dir: Path, lazy_load: bool = False) -> Settings:
    return Settings(model_name="scaler", model_path=store.url(PREFIX), cache_dir=str(cache_dir),
                    lazy_load=lazy_load)


def _only_version(app: App) -> ModelVersion:
    (version,) = app.manager.models["scaler"].versions.values()
    return version


def test_only_the_blob_with_this_hosts_key_is_downloaded_and_imported(
        store: Store, tmp_path: Path) -> None:
    put_scaler(store, PREFIX, 1)
    repository = open_repository(store.url(PREFIX), tmp_path / "probe")
    before = repository.versions()
    first = _only_version(start_app(_settings(store, tmp_path / "first")))
    assert first.timings["blob_hit"] == 0.0
    blob = compiled_cache.write(first._compiled, first.blob_key, tmp_path / "export")
    store.put(f"{PREFIX}/1/{BLOB_FOLDER}/{blob.name}", blob.read_bytes())
    store.put(f"{PREFIX}/1/{BLOB_FOLDER}/{'0' * 32}.blob", b"another CPU's blob" * 1000)
    assert repository.versions() == before  # not a changed version: no reload

    app = start_app(_settings(store, tmp_path / "second"))
    second = _only_version(app)
    assert second.timings["blob_hit"] == 1.0
    assert sorted(p.name for p in (second.folder / BLOB_FOLDER).iterdir()) == [blob.name]
    assert predict(app, version=1) == (200, scaled(1))


def test_a_broken_blob_in_the_bucket_falls_back_to_a_compile(
        store: Store, tmp_path: Path) -> None:
    put_scaler(store, PREFIX, 1)
    first = _only_version(start_app(_settings(store, tmp_path / "first")))
    store.put(f"{PREFIX}/1/{BLOB_FOLDER}/{first.blob_key}.blob", b"x" * 100)
    app = start_app(_settings(store, tmp_path / "second"))
    assert _only_version(app).timings["blob_hit"] == 0.0
    assert predict(app, version=1) == (200, scaled(1))


def test_a_blob_that_cannot_be_written_falls_back_to_a_compile(
        store: Store, tmp_path: Path) -> None:
    """A local write failure (here a folder where the blob goes) is not a failed load."""
    put_scaler(store, PREFIX, 1)
    first = _only_version(start_app(_settings(store, tmp_path / "first")))
    store.put(f"{PREFIX}/1/{BLOB_FOLDER}/{first.blob_key}.blob", compiled_cache.write(
        first._compiled, first.blob_key, tmp_path / "export").read_bytes())
    app = start_app(_settings(store, tmp_path / "second", lazy_load=True))
    (_only_version(app).folder / BLOB_FOLDER / f"{first.blob_key}.blob").mkdir(parents=True)
    assert predict(app, version=1) == (200, scaled(1))
    assert _only_version(app).timings["blob_hit"] == 0.0


def test_a_blob_gone_from_the_bucket_by_the_load_falls_back_to_a_compile(
        store: Store, tmp_path: Path) -> None:
    """Listed when the version was fetched, deleted before the (lazy) load downloads it."""
    put_scaler(store, PREFIX, 1)
    first = _only_version(start_app(_settings(store, tmp_path / "first")))
    key = f"{PREFIX}/1/{BLOB_FOLDER}/{first.blob_key}.blob"
    store.put(key, compiled_cache.write(
        first._compiled, first.blob_key, tmp_path / "export").read_bytes())
    app = start_app(_settings(store, tmp_path / "second", lazy_load=True))
    store.delete(key)
    assert predict(app, version=1) == (200, scaled(1))
    assert _only_version(app).timings["blob_hit"] == 0.0
