"""Fixtures: one real emulator per provider for the session, and a `store` that seeds a fresh
bucket through the provider's real SDK, parametrized over s3 (REST client and boto3) / gs / az.

An emulator that cannot start fails the test with its command and log (never a skip).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.core.storage.helpers import STORES, Store, use_store_env
from tests.emulators import EMULATORS, Emulator


@pytest.fixture(scope="session")
def emulators() -> Iterator[dict[str, Emulator]]:
    started: dict[str, Emulator] = {}
    try:
        for scheme, cls in EMULATORS.items():
            started[scheme] = cls().start()
        yield started
    finally:
        for emulator in started.values():
            emulator.close()


@pytest.fixture(params=sorted(STORES))
def store(
    request: pytest.FixtureRequest,
    emulators: dict[str, Emulator],
    monkeypatch: pytest.MonkeyPatch,
) -> Store:
    return use_store_env(monkeypatch, emulators[STORES[request.param].scheme], request.param)


@pytest.fixture(params=sorted(STORES))
def own_store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """A bucket on a private emulator the test may kill (the session one stays up)."""
    emulator = EMULATORS[STORES[request.param].scheme]().start()
    try:
        yield use_store_env(monkeypatch, emulator, request.param)
    finally:
        emulator.close()


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"
