"""Pre-tokenized embeddings input on a model whose config.json names no vocab_size: a token id
no int64 holds is a 400 in the OpenAI shape, as any other bad id (it was a 500)."""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest

from core.api import App, make_request
from core.config import Settings
from core.serving.registry import ModelManager
from tests.core.openai.conftest import Call, Repo


@pytest.fixture(scope="module")
def no_vocab(text_repo: Repo, tmp_path_factory: pytest.TempPathFactory) -> Call:
    """The App serving all-MiniLM-L6-v2 as "novocab", vocab_size dropped from config.json."""
    root = tmp_path_factory.mktemp("no-vocab")
    folder = root / "novocab" / "1"
    shutil.copytree(text_repo.minilm, folder)
    model_config = json.loads((folder / "config.json").read_text())
    del model_config["vocab_size"]
    (folder / "config.json").write_text(json.dumps(model_config))
    config = {"model_config_list": [{"config": {"name": "novocab", "base_path": "novocab"}}]}
    (root / "config.json").write_text(json.dumps(config))
    settings = Settings(config_path=str(root / "config.json"), cache_dir=str(root / "cache"))
    app = App(ModelManager.start(settings), settings)

    def run(body: Any) -> tuple[int, Any]:
        response = app.handle(make_request("POST", "/v3/embeddings", json.dumps(body).encode()))
        return response.status, json.loads(response.body)

    return run


@pytest.mark.parametrize("ids", [[101, 2**63, 102], [101, 2**31, 102], [-1]])
def test_an_id_out_of_range_is_a_400(no_vocab: Call, ids: list[int]) -> None:
    status, body = no_vocab({"model": "novocab", "input": [ids]})
    assert (status, body["error"]) == (
        400,
        {
            "message": "Token ids must be in [0, 2147483648)",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        },
    )


def test_ids_in_range_embed(no_vocab: Call) -> None:
    status, body = no_vocab({"model": "novocab", "input": [[101, 7592, 102]]})
    assert status == 200 and len(body["data"][0]["embedding"]) == 384
