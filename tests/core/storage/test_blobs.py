"""Compiled blobs stored next to a version in a bucket (s3 / gs / az on real emulators): a new
instance downloads the model's graph and only the blob with its own key, imports it instead of
compiling, and leaves the weights in the bucket unless it has to compile; a blob added later
does not make the version look changed."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

import pytest

from core.api import App
from core.config import Settings
from core.serving.model import ModelVersion
from core.storage import BLOB_FOLDER, bucket, open_repository
from demo import models
from tests.core.storage.helpers import Store
from tests.core.storage.serving import FILES, call, predict, put_scaler, scaled, start_app

PREFIX = "repo/scaler"


def _settings(store: Store, cache_dir: Path, lazy_load: bool = False) -> Settings:
    return Settings(
        model_name="scaler",
        model_path=store.url(PREFIX),
        cache_dir=str(cache_dir),
        lazy_load=lazy_load,
    )


def _only_version(app: App) -> ModelVersion:
    (version,) = app.manager.models["scaler"].versions.values()
    return version


def _upload_blob(store: Store, version: ModelVersion, export: Path) -> str:
    """Export what `version` compiled into the bucket, as export_manager's docs say; its key."""
    key = f"{PREFIX}/1/{BLOB_FOLDER}/{version.blob_key}.blob"
    store.put(key, _exported(version, export))
    return key


def _exported(version: ModelVersion, folder: Path) -> bytes:
    blob = version.export_blob(folder)
    assert blob is not None
    return blob.read_bytes()


@pytest.fixture
def big_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every weight file counts as big enough to leave in the bucket (the scaler's are tiny)."""
    monkeypatch.setattr(bucket, "DEFER_MIN_BYTES", 1)


def test_only_the_blob_with_this_hosts_key_is_downloaded_and_imported(
    store: Store, tmp_path: Path
) -> None:
    put_scaler(store, PREFIX, 1)
    repository = open_repository(store.url(PREFIX), tmp_path / "probe")
    before = repository.versions()
    first = _only_version(start_app(_settings(store, tmp_path / "first")))
    assert first.timings["blob_hit"] == 0.0
    blob = first.export_blob(tmp_path / "export")
    assert blob is not None
    store.put(f"{PREFIX}/1/{BLOB_FOLDER}/{blob.name}", blob.read_bytes())
    store.put(f"{PREFIX}/1/{BLOB_FOLDER}/{'0' * 32}.blob", b"another CPU's blob" * 1000)
    assert repository.versions() == before  # not a changed version: no reload

    app = start_app(_settings(store, tmp_path / "second"))
    second = _only_version(app)
    assert second.timings["blob_hit"] == 1.0
    assert sorted(p.name for p in (second.folder / BLOB_FOLDER).iterdir()) == [blob.name]
    assert predict(app, version=1) == (200, scaled(1))


def test_a_broken_blob_in_the_bucket_falls_back_to_a_compile(store: Store, tmp_path: Path) -> None:
    put_scaler(store, PREFIX, 1)
    first = _only_version(start_app(_settings(store, tmp_path / "first")))
    store.put(f"{PREFIX}/1/{BLOB_FOLDER}/{first.blob_key}.blob", b"x" * 100)
    app = start_app(_settings(store, tmp_path / "second"))
    assert _only_version(app).timings["blob_hit"] == 0.0
    assert predict(app, version=1) == (200, scaled(1))


def test_a_blob_that_cannot_be_written_falls_back_to_a_compile(
    store: Store, tmp_path: Path
) -> None:
    """A local write failure (here a folder where the blob goes) is not a failed load."""
    put_scaler(store, PREFIX, 1)
    first = _only_version(start_app(_settings(store, tmp_path / "first")))
    store.put(
        f"{PREFIX}/1/{BLOB_FOLDER}/{first.blob_key}.blob", _exported(first, tmp_path / "export")
    )
    app = start_app(_settings(store, tmp_path / "second", lazy_load=True))
    (_only_version(app).folder / BLOB_FOLDER / f"{first.blob_key}.blob").mkdir(parents=True)
    assert predict(app, version=1) == (200, scaled(1))
    assert _only_version(app).timings["blob_hit"] == 0.0


def test_a_blob_gone_from_the_bucket_by_the_load_falls_back_to_a_compile(
    store: Store, tmp_path: Path
) -> None:
    """Listed when the version was fetched, deleted before the (lazy) load downloads it."""
    put_scaler(store, PREFIX, 1)
    first = _only_version(start_app(_settings(store, tmp_path / "first")))
    key = f"{PREFIX}/1/{BLOB_FOLDER}/{first.blob_key}.blob"
    store.put(key, _exported(first, tmp_path / "export"))
    app = start_app(_settings(store, tmp_path / "second", lazy_load=True))
    store.delete(key)
    assert predict(app, version=1) == (200, scaled(1))
    assert _only_version(app).timings["blob_hit"] == 0.0


def test_with_a_matching_blob_the_weights_stay_in_the_bucket(
    store: Store, tmp_path: Path, big_weights: None
) -> None:
    """The key names the weights by their listed tags, so the instance that compiled them
    and one that never downloads them agree on the blob's name."""
    put_scaler(store, PREFIX, 1)
    store.put(f"{PREFIX}/1/variables/data", os.urandom(1 << 20))
    first = _only_version(start_app(_settings(store, tmp_path / "first")))
    assert (first.folder / "model.bin").is_file()  # no blobs listed: everything downloaded
    _upload_blob(store, first, tmp_path / "export")

    app = start_app(_settings(store, tmp_path / "second"))
    second = _only_version(app)
    assert second.timings["blob_hit"] == 1.0
    assert not (second.folder / "model.bin").exists()
    assert not (second.folder / "variables").exists()
    assert second.inputs == first.inputs and second.outputs == first.outputs
    assert predict(app, version=1) == (200, scaled(1))


def test_without_a_matching_blob_the_weights_are_downloaded_to_compile(
    store: Store, tmp_path: Path, big_weights: None
) -> None:
    put_scaler(store, PREFIX, 1)
    store.put(f"{PREFIX}/1/{BLOB_FOLDER}/{'0' * 32}.blob", b"another CPU's blob" * 1000)
    app = start_app(_settings(store, tmp_path / "cache"))
    version = _only_version(app)
    assert version.timings["blob_hit"] == 0.0
    assert (version.folder / "model.bin").is_file()
    assert predict(app, version=1) == (200, scaled(1))


def test_a_cached_folder_left_without_weights_gets_them_once_the_blob_is_gone(
    store: Store, tmp_path: Path, big_weights: None
) -> None:
    """Another instance on the same cache volume served the folder from a blob; with the blob
    gone from the bucket and from the folder, this one downloads the weights and compiles."""
    put_scaler(store, PREFIX, 1)
    first = _only_version(start_app(_settings(store, tmp_path / "first")))
    key = _upload_blob(store, first, tmp_path / "export")
    shared = tmp_path / "shared"
    served = _only_version(start_app(_settings(store, shared)))
    assert served.timings["blob_hit"] == 1.0 and not (served.folder / "model.bin").exists()
    store.delete(key)
    (served.folder / BLOB_FOLDER / key.rsplit("/", 1)[1]).unlink()

    app = start_app(_settings(store, shared))
    version = _only_version(app)
    assert version.folder == served.folder
    assert version.timings["blob_hit"] == 0.0
    assert predict(app, version=1) == (200, scaled(1))


def test_weights_gone_from_the_bucket_before_a_compile_fail_the_load_clearly(
    store: Store, tmp_path: Path, big_weights: None
) -> None:
    """Listed at the fetch, deleted before the (lazy) load, with no blob for this host: the
    compile cannot download them; the version reports why and the server keeps answering."""
    put_scaler(store, PREFIX, 1)
    store.put(f"{PREFIX}/1/{BLOB_FOLDER}/{'0' * 32}.blob", b"another CPU's blob" * 1000)
    app = start_app(_settings(store, tmp_path / "cache", lazy_load=True))
    store.delete(f"{PREFIX}/1/model.bin")
    status, error = predict(app, version=1)
    # Azurite answers the If-Match of a deleted blob 412, Azure 404
    gone = ("object not found", "the object changed or was deleted since it was listed (412)")
    assert status == 404 and error.endswith(tuple(f"/1/model.bin: {g}" for g in gone)), error
    assert call(app, "GET", "/v2/health/live")[0] == 200


def test_a_blob_made_for_replaced_weights_is_not_used(
    store: Store, tmp_path: Path, big_weights: None
) -> None:
    """New weights of the same size under the same names: the old blob would answer with the
    old model; the weights' new tags give the version a new key, so it compiles them."""
    put_scaler(store, PREFIX, 1)
    first = _only_version(start_app(_settings(store, tmp_path / "first")))
    _upload_blob(store, first, tmp_path / "export")
    put_scaler(store, PREFIX, 1, factor=3.0)
    app = start_app(_settings(store, tmp_path / "second"))
    assert _only_version(app).timings["blob_hit"] == 0.0
    assert predict(app, version=1) == (200, scaled(3))


def test_export_blobs_per_version_says_where_each_blob_goes_in_the_bucket(
    store: Store, tmp_path: Path, big_weights: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """The documented way to fill a bucket with blobs: `ov-serverless export-blobs
    --per_version` from the bucket's model, then each file copied to the place printed beside
    it. A new instance then imports it and never downloads the weights."""
    from handlers import cli

    put_scaler(store, PREFIX, 1)
    assert (
        cli.main(
            [
                "export-blobs",
                str(tmp_path / "out"),
                "--per_version",
                "--model_name",
                "scaler",
                "--model_path",
                store.url(PREFIX),
                "--cache_dir",
                str(tmp_path / "export-cache"),
                "--log_level",
                "WARNING",
            ]
        )
        == 0
    )
    (line,) = capsys.readouterr().out.splitlines()
    local, destination = line.split(" -> ")
    assert Path(local).parent == tmp_path / "out" / "scaler" / "1" / BLOB_FOLDER
    assert destination == f"{store.url(PREFIX)}/1/{BLOB_FOLDER}/{Path(local).name}"
    store.put(destination.removeprefix(store.url() + "/"), Path(local).read_bytes())

    app = start_app(_settings(store, tmp_path / "second"))
    version = _only_version(app)
    assert version.timings["blob_hit"] == 1.0
    assert not (version.folder / "model.bin").exists()
    assert predict(app, version=1) == (200, scaled(1))


def test_a_concurrent_host_finds_the_gathered_blob_before_the_plain_one(
    store: Store, tmp_path: Path
) -> None:
    """A model whose input takes one row compiles gathered on a concurrent host
    (core.runtime.adaptive). With its blob and a one-request host's plain blob both in the
    bucket, a new concurrent instance downloads and imports the gathered one only."""
    with tempfile.TemporaryDirectory() as tmp:
        models.save(models.scaler(3.0, (1, 4)), Path(tmp))
        for name in FILES:
            store.put(f"{PREFIX}/1/{name}", Path(tmp, name).read_bytes())
    concurrent = dataclasses.replace(_settings(store, tmp_path / "first"), concurrent=True)
    first = _only_version(start_app(concurrent))
    single = _only_version(start_app(_settings(store, tmp_path / "single")))
    assert first.gathered and not single.gathered
    gathered = _upload_blob(store, first, tmp_path / "export")
    _upload_blob(store, single, tmp_path / "export")

    app = start_app(dataclasses.replace(concurrent, cache_dir=str(tmp_path / "second")))
    second = _only_version(app)
    assert second.gathered and second.timings["blob_hit"] == 1.0
    assert [p.name for p in (second.folder / BLOB_FOLDER).iterdir()] == [Path(gathered).name]
    assert predict(app, version=1) == (200, scaled(3))
    for version in (first, single, second):
        version.retire(grace=0)
