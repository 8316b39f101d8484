"""`make serve`'s embeddings model: demo.embeddings adds it to the demo repository."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.api import App, make_request
from core.config import Settings
from core.serving.registry import ModelManager
from demo.embeddings import add_embeddings_model


def test_demo_repository_serves_embeddings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("transformers")
    root = tmp_path / "demo"
    assert add_embeddings_model(root)
    assert add_embeddings_model(root)  # idempotent: listed once
    names = [
        e["config"]["name"]
        for e in json.loads((root / "config.json").read_text())["model_config_list"]
    ]
    assert names.count("minilm") == 1 and "scaler" in names
    settings = Settings(config_path=str(root / "config.json"), cache_dir=str(tmp_path / "c"))
    app = App(ModelManager.start(settings), settings)
    reply = app.handle(
        make_request("POST", "/v3/embeddings", b'{"model": "minilm", "input": ["hello", "world"]}')
    )
    assert reply.status == 200 and len(json.loads(reply.body)["data"]) == 2
