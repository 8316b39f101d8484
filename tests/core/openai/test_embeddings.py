"""POST /v3/embeddings on the real all-MiniLM-L6-v2, through the App every host shares."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from safetensors.numpy import load_file

from demo.bert_export import minilm_source
from tests.core.openai import reference
from tests.core.openai.conftest import Call, Direct, cosine

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "A man is riding a horse.",
]


def test_numbers_equal_a_numpy_forward_pass(call: Call, minilm_direct: Direct) -> None:
    status, body = call("POST", "/v3/embeddings", {"model": "minilm", "input": SENTENCES})
    assert status == 200, body
    served = np.array([d["embedding"] for d in body["data"]])
    ids, mask = minilm_direct.tokens(SENTENCES)  # the tokenizer IR, run directly
    source = minilm_source()
    weights = load_file(str(source / "model.safetensors"))
    config = json.loads((source / "config.json").read_text())
    hidden = reference.hidden_states(weights, config, ids, mask.astype(np.float64))
    expected = reference.mean_pooled(hidden, mask)  # 1_Pooling says MEAN; normalised
    assert served.shape == (3, 384)
    assert np.abs(served - expected).max() < 1e-4
    assert body["usage"] == {"prompt_tokens": int(mask.sum()), "total_tokens": int(mask.sum())}
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    assert body["object"] == "list" and body["model"] == "minilm"
    assert {d["object"] for d in body["data"]} == {"embedding"}


def test_meaning(call: Call) -> None:
    _, body = call("POST", "/v3/embeddings", {"model": "minilm", "input": SENTENCES})
    food, bread, horse = (np.array(d["embedding"]) for d in body["data"])
    assert cosine(food, bread) > cosine(food, horse) + 0.2


def test_base64_is_little_endian_float32(call: Call) -> None:
    _, floats = call("POST", "/v1/embeddings", {"model": "minilm", "input": "hello"})
    status, packed = call(
        "POST",
        "/v3/embeddings",
        {"model": "minilm", "input": ["hello"], "encoding_format": "base64"},
    )
    assert status == 200
    decoded = np.frombuffer(base64.b64decode(packed["data"][0]["embedding"]), "<f4")
    assert np.array_equal(decoded, np.array(floats["data"][0]["embedding"], np.float32))


def test_single_string_and_aliases(call: Call) -> None:
    bodies = [
        call("POST", path, {"model": "minilm", "input": "A man is eating food."})[1]
        for path in ("/v3/embeddings", "/v1/embeddings", "/v3/v1/embeddings")
    ]
    assert len({json.dumps(b["data"]) for b in bodies}) == 1
    assert len(bodies[0]["data"]) == 1


def test_dimensions_and_user_are_ignored_as_ovms_does(call: Call) -> None:
    status, body = call(
        "POST", "/v3/embeddings", {"model": "minilm", "input": "x", "dimensions": 8, "user": "u-1"}
    )
    assert status == 200 and len(body["data"][0]["embedding"]) == 384


@pytest.mark.parametrize(
    ("request_body", "message"),
    [
        ({"model": "minilm"}, "input field is required"),
        (
            {"model": "minilm", "input": 5},
            "input should be string, array of strings or array of integers",
        ),
        ({"model": "minilm", "input": []}, "input array should not be empty"),
        ({"model": "minilm", "input": ["a", 1]}, "input must be homogeneous"),
        (
            {"model": "minilm", "input": [1.5]},
            "every element in input array should be either string or int",
        ),
        ({"model": "minilm", "input": [[]]}, "inner arrays in input should not be empty"),
        (
            {"model": "minilm", "input": [["a"]]},
            "input must be either array of strings or array of array of integers",
        ),
        ({"model": "minilm", "input": [[101, -1]]}, "Token ids must be in [0, 30522)"),
        (
            {"model": "minilm", "input": "a", "encoding_format": "int8"},
            "encoding_format should either base64 or float",
        ),
        (
            {"model": "minilm", "input": "a", "encoding_format": 1},
            "encoding_format should be string",
        ),
        ({"input": "a"}, "model field is missing in JSON body"),
        ([1, 2], "Received json is not an object"),
    ],
)
def test_bad_requests_are_400_in_the_openai_shape(
    call: Call, request_body: object, message: str
) -> None:
    status, body = call("POST", "/v3/embeddings", request_body)
    assert status == 400
    assert body == {
        "error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}
    }


def test_token_ids_embed_as_their_text(call: Call, minilm_direct: Direct) -> None:
    ids, mask = minilm_direct.tokens(SENTENCES[:2])
    rows = [[int(t) for t in row[:n]] for row, n in zip(ids, mask.sum(1), strict=True)]
    _, texts = call("POST", "/v3/embeddings", {"model": "minilm", "input": SENTENCES[:2]})
    status, tokens = call("POST", "/v3/embeddings", {"model": "minilm", "input": rows})
    assert status == 200
    assert (
        np.abs(
            np.array([d["embedding"] for d in tokens["data"]])
            - np.array([d["embedding"] for d in texts["data"]])
        ).max()
        < 1e-5
    )
    assert tokens["usage"]["prompt_tokens"] == texts["usage"]["prompt_tokens"]
    status, one = call("POST", "/v3/embeddings", {"model": "minilm", "input": rows[0]})
    assert status == 200 and len(one["data"]) == 1


def test_not_json(call: Call) -> None:
    status, body = call("POST", "/v3/embeddings", b"{nope")
    assert status == 400 and body["error"]["message"] == "Cannot parse JSON body"


def test_unknown_model_and_wrong_task(call: Call) -> None:
    status, body = call("POST", "/v3/embeddings", {"model": "nope", "input": "a"})
    assert status == 404 and body["error"]["code"] == "model_not_found"
    status, body = call("POST", "/v3/embeddings", {"model": "cross", "input": "a"})
    assert status == 404 and body["error"]["message"] == "Model cross does not serve embeddings"
    status, body = call("POST", "/v3/embeddings", {"model": "scaler", "input": "a"})
    assert status == 404


def test_too_long_without_truncation(call: Call) -> None:
    status, body = call("POST", "/v3/embeddings", {"model": "minilm", "input": "word " * 600})
    assert status == 400
    assert body["error"]["message"] == "Input length 602 longer than allowed 512"


def test_method_not_allowed_in_the_openai_shape(call: Call) -> None:
    status, body = call("GET", "/v3/embeddings")
    assert status == 405 and body["error"]["type"] == "invalid_request_error"


def test_concurrent_requests_get_their_own_answers(call: Call) -> None:
    """Threads share the tokenizer and model request pools: each gets its own input's vector."""
    from concurrent.futures import ThreadPoolExecutor

    texts = [f"sentence {i} about {'food' if i % 2 else 'horses'}" for i in range(16)]
    alone = {t: call("POST", "/v3/embeddings", {"model": "minilm", "input": t})[1] for t in texts}
    with ThreadPoolExecutor(8) as pool:
        together = list(
            pool.map(
                lambda t: call("POST", "/v3/embeddings", {"model": "minilm", "input": t})[1],
                texts * 2,
            )
        )
    for text, body in zip(texts * 2, together, strict=True):
        assert (
            np.abs(
                np.array(body["data"][0]["embedding"])
                - np.array(alone[text]["data"][0]["embedding"])
            ).max()
            < 1e-5
        )
