"""A request of many long texts runs in slices: the server's memory stays bounded, and every
text embeds or scores as it would alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.openai import servable
from tests.core.openai.conftest import Call

LONG = " ".join(["word"] * 500)  # 502 tokens with [CLS] and [SEP], all-MiniLM's context 512


def _peak_growth_mb(call: Call, texts: list[str]) -> float:
    """How far the process's peak RSS rises over its RSS at the start of one request."""
    status = Path("/proc/self/status")
    Path("/proc/self/clear_refs").write_text("5")  # the peak restarts from the current RSS

    def peak() -> int:
        return int(status.read_text().split("VmHWM:")[1].split()[0])

    start = peak()
    code, body = call("POST", "/v3/embeddings", {"model": "minilm", "input": texts})
    assert code == 200, body
    assert len(body["data"]) == len(texts)
    return (peak() - start) / 1024


def test_many_long_texts_take_no_more_memory_than_one_slice(
    call: Call, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = 8  # a slice (32 by default: the test would take 4x longer)
    monkeypatch.setattr(servable, "ATTENTION_BUDGET", rows * 512**2)
    one_slice = _peak_growth_mb(call, [LONG] * rows)
    four_slices = _peak_growth_mb(call, [LONG] * (4 * rows))
    # as one inference, 4x the rows took 2-4x the memory of one slice
    assert four_slices < 1.2 * one_slice + 20, (one_slice, four_slices)


@pytest.mark.parametrize("budget_rows", [1, 2, 3])
def test_each_text_embeds_as_alone_whatever_the_slices(
    call: Call, monkeypatch: pytest.MonkeyPatch, budget_rows: int
) -> None:
    texts = ["a short one", LONG[:200], "the quick brown fox jumps over the lazy dog", "x", LONG]
    alone = [call("POST", "/v3/embeddings", {"model": "minilm", "input": t})[1] for t in texts]
    monkeypatch.setattr(servable, "ATTENTION_BUDGET", budget_rows * 512**2)
    code, body = call("POST", "/v3/embeddings", {"model": "minilm", "input": texts})
    assert code == 200, body
    assert [item["index"] for item in body["data"]] == list(range(len(texts)))
    for item, single in zip(body["data"], alone, strict=True):
        np.testing.assert_allclose(item["embedding"], single["data"][0]["embedding"], atol=1e-5)
    assert body["usage"]["prompt_tokens"] == sum(s["usage"]["prompt_tokens"] for s in alone)


def test_rerank_scores_the_same_in_slices(call: Call, monkeypatch: pytest.MonkeyPatch) -> None:
    request = {
        "model": "cross",
        "query": "what is openvino",
        "documents": ["an inference toolkit", "a fruit", "a compiler for models", "weather"],
    }
    code, whole = call("POST", "/v3/rerank", request)
    assert code == 200, whole
    monkeypatch.setattr(servable, "ATTENTION_BUDGET", 1)  # one row at a time
    code, sliced = call("POST", "/v3/rerank", request)
    assert code == 200, sliced
    by_index = {r["index"]: r["relevance_score"] for r in whole["results"]}
    for result in sliced["results"]:
        assert result["relevance_score"] == pytest.approx(by_index[result["index"]], abs=1e-6)
