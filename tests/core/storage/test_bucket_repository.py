"""The Repository contract on each real emulator (moto S3, gcp-storage-emulator, Azurite)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from core.errors import StorageError
from core.storage import open_repository, read_file
from tests.core.storage.helpers import Store, infer


def _files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def seed(store: Store) -> dict[int, dict[str, bytes]]:
    files = {1: store.put_version("model", 1, 2.0), 2: store.put_version("model", 2, 3.0)}
    store.put("model/README.md", b"not a version")
    store.put("model/abc/file.txt", b"not numeric")
    store.put("model/0/model.xml", b"version 0 is ignored, as on local disk")
    return files


def test_versions_lists_the_numeric_folders(store: Store, cache_dir: Path) -> None:
    seed(store)
    found = open_repository(store.url("model"), cache_dir).versions()
    assert sorted(found) == [1, 2]
    assert found[1] != found[2]


def test_fetch_downloads_exactly_the_version_files(store: Store, cache_dir: Path) -> None:
    files = seed(store)
    store.put("model/2/extra/labels.txt", b"cat\ndog\n")
    repo = open_repository(store.url("model") + "/", cache_dir)
    folder = repo.fetch(2).folder
    assert _files(folder) == {**files[2], "extra/labels.txt": b"cat\ndog\n"}
    assert folder.parent == cache_dir / store.scheme / store.bucket / "model"
    assert folder.name == f"2-{repo.versions()[2]}"
    # no temp folder left; the lock file marks the folder as in use by this process
    assert sorted(p.name for p in folder.parent.iterdir()) == [f".{folder.name}.lock", folder.name]
    np.testing.assert_allclose(infer(folder), np.full([1, 4], 3.0))


def test_second_fetch_reuses_the_cache(
    store: Store, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(store)
    repo = open_repository(store.url("model"), cache_dir)
    first = repo.fetch(1).folder

    def no_download(*_: object) -> None:
        raise AssertionError("downloaded again")

    monkeypatch.setattr(repo.backend, "download", no_download)  # type: ignore[attr-defined]
    assert repo.fetch(1).folder == first
    assert open_repository(store.url("model"), cache_dir).fetch(1).folder == first


def test_partial_download_never_becomes_visible(
    store: Store, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(store)
    repo = open_repository(store.url("model"), cache_dir)
    backend = repo.backend  # type: ignore[attr-defined]
    real = backend.download

    def flaky(obj: object, dest: Path) -> None:
        if dest.name == "model.bin":
            raise StorageError("connection dropped")
        real(obj, dest)

    monkeypatch.setattr(backend, "download", flaky)
    with pytest.raises(StorageError, match="connection dropped"):
        repo.fetch(1)
    root = cache_dir / store.scheme / store.bucket / "model"
    assert list(root.iterdir()) == []
    monkeypatch.setattr(backend, "download", real)
    assert _files(repo.fetch(1).folder).keys() == {"model.xml", "model.bin"}


def test_versions_follow_the_bucket(store: Store, cache_dir: Path) -> None:
    seed(store)
    repo = open_repository(store.url("model"), cache_dir)
    before = repo.versions()
    store.put_version("model", 3, 4.0)
    assert sorted(repo.versions()) == [1, 2, 3]
    for name in ("model.xml", "model.bin"):
        store.delete(f"model/1/{name}")
    after = repo.versions()
    assert sorted(after) == [2, 3]
    assert after[2] == before[2]


def test_changed_file_changes_fingerprint_and_folder(store: Store, cache_dir: Path) -> None:
    seed(store)
    repo = open_repository(store.url("model"), cache_dir)
    old_print, old_folder = repo.versions()[1], repo.fetch(1).folder
    store.put("model/1/model.bin", tiny_bin(5.0))
    new_print = repo.versions()[1]
    assert new_print != old_print
    new_folder = repo.fetch(1).folder
    assert new_folder != old_folder and new_folder.name == f"1-{new_print}"
    np.testing.assert_allclose(infer(new_folder), np.full([1, 4], 5.0))
    np.testing.assert_allclose(infer(old_folder), np.full([1, 4], 2.0))  # old one intact


def tiny_bin(scale: float) -> bytes:
    return np.full([1, 4], scale, np.float32).tobytes()


def test_fetch_of_a_missing_version(store: Store, cache_dir: Path) -> None:
    seed(store)
    with pytest.raises(StorageError, match="Version folder is missing"):
        open_repository(store.url("model"), cache_dir).fetch(7)


def test_missing_bucket_is_named(store: Store, cache_dir: Path) -> None:
    url = f"{store.scheme}://no-such-bucket-4242/model"
    with pytest.raises(StorageError, match="'no-such-bucket-4242' does not exist") as err:
        open_repository(url, cache_dir).versions()
    assert isinstance(err.value.__cause__, Exception)


def test_missing_prefix(store: Store, cache_dir: Path) -> None:
    seed(store)
    with pytest.raises(StorageError, match="invalid or doesn't exists.*nothing-here"):
        open_repository(store.url("nothing-here"), cache_dir).versions()


def test_read_file(store: Store) -> None:
    config = b'{"model_config_list": [{"config": {"name": "m", "base_path": "x"}}]}'
    store.put("configs/config.json", config)
    assert read_file(store.url("configs/config.json")) == config
    with pytest.raises(StorageError, match="not found"):
        read_file(store.url("configs/absent.json"))


def test_one_structured_log_line_per_fetch(
    store: Store, cache_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    files = seed(store)
    repo = open_repository(store.url("model"), cache_dir)
    with caplog.at_level(logging.INFO, logger="ov_serverless.storage"):
        repo.fetch(1)
        repo.fetch(1)
    first, second = (r for r in caplog.records if r.name == "ov_serverless.storage")
    assert (first.files, first.bytes, first.cached) == (  # type: ignore[attr-defined]
        2,
        sum(len(b) for b in files[1].values()),
        False,
    )
    assert first.seconds >= 0 and first.version == 1  # type: ignore[attr-defined]
    assert second.cached is True  # type: ignore[attr-defined]


def test_concurrent_fetches_agree(store: Store, cache_dir: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    seed(store)
    repos = [open_repository(store.url("model"), cache_dir) for _ in range(4)]
    with ThreadPoolExecutor(4) as pool:
        folders = set(pool.map(lambda repo: repo.fetch(2).folder, repos))
    assert len(folders) == 1
    (folder,) = folders
    assert sorted(p.name for p in folder.parent.iterdir()) == [f".{folder.name}.lock", folder.name]
    np.testing.assert_allclose(infer(folder), np.full([1, 4], 3.0))


def test_repository_at_the_bucket_root_and_deep_prefixes(store: Store, cache_dir: Path) -> None:
    for name, data in seed(store)[1].items():
        store.put(f"1/{name}", data)
        store.put(f"a/b/c/3/{name}", data)
    assert sorted(open_repository(store.url(), cache_dir).versions()) == [1]
    deep = open_repository(store.url("a/b/c"), cache_dir)
    assert deep.fetch(3).folder.parent == cache_dir / store.scheme / store.bucket / "a" / "b" / "c"
