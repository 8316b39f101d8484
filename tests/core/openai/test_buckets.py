"""A rerank model in S3, Cloud Storage and Azure Blob (real emulators) serves as from disk."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.api import App, make_request
from core.config import Settings
from core.serving.registry import ModelManager
from tests.core.openai.conftest import Call, Repo
from tests.core.storage.helpers import use_store_env
from tests.emulators import EMULATORS, Emulator

RERANK = {
    "model": "cross",
    "query": "what do pandas eat",
    "documents": ["Pandas eat bamboo.", "Stocks fell on Monday.", "Bread recipes."],
}


@pytest.fixture(scope="module", params=["s3", "gs", "az"])
def emulator(request: pytest.FixtureRequest) -> Iterator[Emulator]:
    started = EMULATORS[request.param]().start()
    try:
        yield started
    finally:
        started.close()


def test_rerank_model_from_a_bucket(
    emulator: Emulator, text_repo: Repo, call: Call, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scheme = {"MotoS3": "s3", "FakeGcs": "gs", "Azurite": "az"}[type(emulator).__name__]
    store = use_store_env(monkeypatch, emulator, scheme)
    for path in text_repo.cross.rglob("*"):
        if path.is_file():
            store.put(f"cross/1/{path.relative_to(text_repo.cross).as_posix()}", path.read_bytes())
    settings = Settings(
        model_name="cross", model_path=store.url("cross"), cache_dir=str(tmp_path / "cache")
    )
    app = App(ModelManager.start(settings), settings)
    reply = app.handle(make_request("POST", "/v3/rerank", json.dumps(RERANK).encode()))
    assert reply.status == 200, reply.body
    assert json.loads(reply.body) == call("POST", "/v3/rerank", RERANK)[1]
