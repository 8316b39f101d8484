"""A tokenizer IR that pads a batch on the left (openvino-tokenizers keeps the Hugging Face
tokenizer's padding side; Qwen3-Embedding's is left): each text still gets its own tokens and
the same embedding, whatever it is batched with."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from typing import Any

import numpy as np
import openvino as ov
import pytest

from core.api import App, make_request
from core.config import Settings
from core.serving.registry import ModelManager
from demo.bert_export import minilm_source, tokenizer_model
from tests.core.openai.conftest import Call, Repo

TEXTS = ["hello", "hello big wide world"]


@pytest.fixture(scope="module")
def left(text_repo: Repo, tmp_path_factory: pytest.TempPathFactory) -> Call:
    """The App serving all-MiniLM-L6-v2 and the test cross-encoder as "left" and
    "left-cross", their tokenizer converted to pad left."""
    root = tmp_path_factory.mktemp("left-padding")
    tokenizer = tokenizer_model(minilm_source(), padding_side="left")
    entries = []
    for name, source in (("left", text_repo.minilm), ("left-cross", text_repo.cross)):
        shutil.copytree(source, root / name / "1")
        ov.save_model(tokenizer, root / name / "1" / "openvino_tokenizer.xml")
        entries.append({"config": {"name": name, "base_path": name}})
    (root / "config.json").write_text(json.dumps({"model_config_list": entries}))
    settings = Settings(config_path=str(root / "config.json"), cache_dir=str(root / "cache"))
    app = App(ModelManager.start(settings), settings)

    def run(method: str, path: str, body: Any = None) -> tuple[int, Any]:
        request = make_request(method, path, json.dumps(body).encode(), {})
        response = app.handle(request)
        return response.status, json.loads(response.body)

    return run


def _vectors(call: Callable[..., tuple[int, Any]], model: str, texts: Any) -> np.ndarray:
    status, body = call("POST", "/v3/embeddings", {"model": model, "input": texts})
    assert status == 200, body
    return np.array([d["embedding"] for d in body["data"]])


def test_the_tokenizer_pads_left(text_repo: Repo) -> None:
    """The premise: the converted tokenizer left-pads the shorter row."""
    import openvino_tokenizers

    core = ov.Core()
    core.add_extension(str(openvino_tokenizers._ext_path))
    tokenizer = core.compile_model(tokenizer_model(minilm_source(), padding_side="left"), "CPU")
    mask = tokenizer([np.array(TEXTS)])["attention_mask"]
    assert mask[0].tolist() == [0, 0, 0, 1, 1, 1]


def test_tokenize_gives_each_text_its_tokens(left: Call, call: Call) -> None:
    expected = [[101, 7592, 102], [101, 7592, 2502, 2898, 2088, 102]]
    assert call("POST", "/v3/tokenize", {"model": "minilm", "text": TEXTS}) == (
        200,
        {"tokens": expected},
    )
    assert left("POST", "/v3/tokenize", {"model": "left", "text": TEXTS}) == (
        200,
        {"tokens": expected},
    )
    body = {"model": "left", "text": "hello", "add_special_tokens": False}
    assert left("POST", "/v3/tokenize", body) == (200, {"tokens": [7592]})


def test_a_text_embeds_the_same_alone_or_batched(left: Call, call: Call) -> None:
    alone = _vectors(left, "left", TEXTS[0])[0]
    batched = _vectors(left, "left", TEXTS)
    right = _vectors(call, "minilm", TEXTS)
    assert np.abs(batched[0] - alone).max() < 1e-5
    assert np.abs(batched - right).max() < 1e-5


def test_usage_counts_the_texts_tokens(left: Call) -> None:
    status, body = left("POST", "/v3/embeddings", {"model": "left", "input": TEXTS})
    assert status == 200 and body["usage"]["prompt_tokens"] == 9


def test_truncation_keeps_the_closing_token(left: Call) -> None:
    body = {"model": "left", "text": ["hello", "hello big wide world"], "max_length": 4}
    assert left("POST", "/v3/tokenize", body) == (
        200,
        {"tokens": [[101, 7592, 102], [101, 7592, 2502, 102]]},
    )


def test_rerank_scores_as_with_a_right_padding_tokenizer(left: Call, call: Call) -> None:
    """The query and documents are tokenized in one batch; each keeps its own tokens."""
    body = {"query": "what do pandas eat", "documents": ["Pandas eat bamboo.", "Stocks fell."]}
    status, right = call("POST", "/v3/rerank", {"model": "cross", **body})
    assert status == 200, right
    status, padded_left = left("POST", "/v3/rerank", {"model": "left-cross", **body})
    assert status == 200, padded_left
    assert [r["index"] for r in padded_left["results"]] == [r["index"] for r in right["results"]]
    scores = [
        (r["relevance_score"], s["relevance_score"])
        for r, s in zip(padded_left["results"], right["results"], strict=True)
    ]
    assert all(abs(a - b) < 1e-6 for a, b in scores)
