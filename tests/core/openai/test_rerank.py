"""POST /v3/rerank on a tiny random-weight BERT cross-encoder (48-token context), checked
against the same IRs run directly with openvino and against a numpy forward pass."""

from __future__ import annotations

import numpy as np
import pytest

from tests.core.openai import reference
from tests.core.openai.conftest import CROSS_CONFIG, Call, Direct, Repo

CLS, SEP = 101, 102
QUERY = "what do pandas eat"
DOCS = [
    "Pandas eat bamboo almost all day long.",
    "The stock market fell on Monday.",
    "Bamboo grows fast in the mountains of China.",
    "A recipe for bread.",
]


def pair_scores(direct: Direct, query: str, documents: list[str], context: int = 48) -> np.ndarray:
    """[CLS] query [SEP] [SEP] chunk [SEP] per chunk of each document; a document's score is
    the sigmoid of its best chunk's logit (OVMS's layout and rule), computed directly."""
    ids, mask = direct.tokens([query, *documents])
    bodies = [list(row[1 : n - 1]) for row, n in zip(ids, mask.sum(1), strict=True)]
    q, docs = bodies[0][: context // 2], bodies[1:]
    room = context - len(q) - 4
    best = []
    for doc in docs:
        chunks = [doc[i : i + room] for i in range(0, max(len(doc), 1), room)]
        scores = []
        for chunk in chunks:
            row = np.array([[CLS, *q, SEP, SEP, *chunk, SEP]], dtype=np.int64)
            logit = direct.run(row, np.ones_like(row))[0, 0]
            scores.append(1 / (1 + np.exp(-logit)))
        best.append(max(scores))
    return np.array(best)


def test_scores_equal_a_direct_openvino_run(call: Call, cross_direct: Direct) -> None:
    status, body = call("POST", "/v3/rerank", {"model": "cross", "query": QUERY, "documents": DOCS})
    assert status == 200, body
    expected = pair_scores(cross_direct, QUERY, DOCS)
    served = {r["index"]: r["relevance_score"] for r in body["results"]}
    assert sorted(served) == [0, 1, 2, 3]
    assert np.abs(np.array([served[i] for i in range(4)]) - expected).max() < 1e-5
    assert [r["index"] for r in body["results"]] == list(np.argsort(-expected))
    assert "document" not in body["results"][0]


def test_direct_run_equals_a_numpy_forward_pass(cross_direct: Direct, text_repo: Repo) -> None:
    row = np.array([[CLS, 2054, 2079, SEP, SEP, 22067, 4521, SEP]], dtype=np.int64)
    logits = reference.cross_encoder_logits(
        text_repo.cross_weights, CROSS_CONFIG, row, np.ones(row.shape)
    )
    assert abs(cross_direct.run(row, np.ones_like(row))[0, 0] - logits[0, 0]) < 1e-4


def test_top_n_and_return_documents(call: Call) -> None:
    _, full = call("POST", "/v1/rerank", {"model": "cross", "query": QUERY, "documents": DOCS})
    status, top = call(
        "POST",
        "/v3/rerank",
        {"model": "cross", "query": QUERY, "documents": DOCS, "top_n": 2, "return_documents": True},
    )
    assert status == 200
    assert [r["index"] for r in top["results"]] == [r["index"] for r in full["results"][:2]]
    assert [r["document"] for r in top["results"]] == [
        {"text": DOCS[r["index"]]} for r in full["results"][:2]
    ]


def test_long_document_is_chunked_and_scored_by_its_best_chunk(
    call: Call, cross_direct: Direct
) -> None:
    long_doc = " ".join(["pandas eat bamboo"] * 40 + ["the market fell"] * 10)
    docs = [long_doc, DOCS[1]]
    status, body = call("POST", "/v3/rerank", {"model": "cross", "query": QUERY, "documents": docs})
    assert status == 200, body
    served = {r["index"]: r["relevance_score"] for r in body["results"]}
    expected = pair_scores(cross_direct, QUERY, docs)
    assert abs(served[0] - expected[0]) < 1e-5 and abs(served[1] - expected[1]) < 1e-5


@pytest.mark.parametrize(
    ("documents", "message"),
    [
        (["d"] * 21, "Number of documents exceeds max_allowed_chunks"),
        (
            ["word " * 400] * 3,
            "Chunking failed: exceeding max_allowed_chunks after chunking limit: 20; actual: ",
        ),
    ],
)
def test_limits(call: Call, documents: list[str], message: str) -> None:
    status, body = call(
        "POST", "/v3/rerank", {"model": "cross", "query": "q", "documents": documents}
    )
    assert status == 400 and body["error"]["message"].startswith(message)


@pytest.mark.parametrize(
    ("request_body", "message"),
    [
        ({"model": "cross", "documents": ["a"]}, "query field is missing in request"),
        ({"model": "cross", "query": 1, "documents": ["a"]}, "query is not a string"),
        ({"model": "cross", "query": "q"}, "documents field is missing in request"),
        ({"model": "cross", "query": "q", "documents": "a"}, "documents is not an array"),
        (
            {"model": "cross", "query": "q", "documents": [1]},
            "documents array element is neither string nor object",
        ),
        (
            {"model": "cross", "query": "q", "documents": ["a"], "top_n": "2"},
            "top_n accepts integer values",
        ),
        (
            {"model": "cross", "query": "q", "documents": ["a"], "return_documents": 1},
            "return_documents accepts boolean values",
        ),
        (
            {"model": "minilm", "query": "q", "documents": ["a"]},
            "Model minilm does not serve rerank",
        ),
    ],
)
def test_bad_requests(call: Call, request_body: object, message: str) -> None:
    status, body = call("POST", "/v3/rerank", request_body)
    assert status in (400, 404) and body["error"]["message"] == message


def test_no_documents(call: Call) -> None:
    assert call("POST", "/v3/rerank", {"model": "cross", "query": "q", "documents": []}) == (
        200,
        {"results": []},
    )


def test_cohere_v2_client_path_and_body(call: Call) -> None:
    """cohere.ClientV2(base_url=".../v3") posts its v2 body to /v3/v2/rerank, which OVMS
    serves (it routes anything under /v3 by the body's model); it was a 404 here."""
    v2_body = {
        "model": "cross",
        "query": QUERY,
        "documents": DOCS,
        "top_n": 2,
        "max_tokens_per_doc": 4096,  # v2's field; ignored, as OVMS ignores it
    }
    status, body = call("POST", "/v3/v2/rerank", v2_body)
    assert status == 200, body
    _, v1 = call("POST", "/v3/rerank", {"model": "cross", "query": QUERY, "documents": DOCS})
    assert body == {"results": v1["results"][:2]}
