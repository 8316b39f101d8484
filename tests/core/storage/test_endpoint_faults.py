"""A storage endpoint that dies fails fast with a StorageError, and works again once back."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from core.errors import StorageError
from core.storage import open_repository, read_file
from tests.core.storage.helpers import Store

FAIL_WITHIN_S = 10.0


def test_dead_endpoint_fails_fast_then_recovers(own_store: Store, cache_dir: Path) -> None:
    store, own_emulator, scheme = own_store, own_store.emulator, own_store.scheme
    store.put_version("model", 1, 2.0)
    repo = open_repository(store.url("model"), cache_dir)
    assert sorted(repo.versions()) == [1]

    own_emulator.kill()
    for attempt in (repo.versions, lambda: repo.fetch(1), lambda: read_file(store.url("x.json"))):
        started = time.monotonic()
        with pytest.raises(StorageError) as err:
            attempt()
        elapsed = time.monotonic() - started
        assert elapsed < FAIL_WITHIN_S, f"took {elapsed:.1f} s: {err.value}"
        assert store.bucket in str(err.value)
        assert "cannot reach" in str(err.value)
    assert not (cache_dir / scheme / store.bucket / "model").exists() or not any(
        (cache_dir / scheme / store.bucket / "model").iterdir()
    )

    own_emulator.start()  # same port, empty (in-memory): seed again
    store.create().put_version("model", 1, 2.0)
    assert sorted(repo.versions()) == [1]
    assert (repo.fetch(1).folder / "model.bin").is_file()
