"""GET /v3/models (and /v1/models), GET /v3/models/{id}, POST /v3/tokenize, and the V3 metrics."""

from __future__ import annotations

import time

import pytest

from core.api import App, make_request
from tests.core.openai.conftest import Call


def test_model_list_names_every_servable(call: Call) -> None:
    for path in ("/v3/models", "/v1/models", "/v3/v1/models"):
        status, body = call("GET", path)
        assert status == 200 and body["object"] == "list"
        assert [m["id"] for m in body["data"]] == ["minilm", "cross", "scaler"]
        entry = body["data"][0]
        assert entry["object"] == "model" and entry["owned_by"] == "OVMS"
        assert abs(entry["created"] - time.time()) < 60


def test_retrieve_one_model(call: Call) -> None:
    status, body = call("GET", "/v3/models/minilm")
    assert status == 200 and body["id"] == "minilm" and body["object"] == "model"
    status, body = call("GET", "/v3/models/nope")
    assert status == 404 and body["error"]["message"] == "Model not found"


def test_v1_models_name_stays_tf_serving_status(call: Call) -> None:
    status, body = call("GET", "/v1/models/scaler")
    assert status == 200 and body["model_version_status"][0]["state"] == "AVAILABLE"


@pytest.mark.parametrize(
    ("request_body", "tokens"),
    [
        ({"model": "minilm", "text": "hello world"}, [101, 7592, 2088, 102]),
        (
            {"model": "minilm", "text": ["hello world", "hello"]},
            [[101, 7592, 2088, 102], [101, 7592, 102]],
        ),
        ({"model": "minilm", "text": "hello world", "add_special_tokens": False}, [7592, 2088]),
        ({"model": "minilm", "text": "hello big world", "max_length": 4}, [101, 7592, 2502, 102]),
        (
            {"model": "minilm", "text": "hello", "max_length": 5, "pad_to_max_length": True},
            [101, 7592, 102, 0, 0],
        ),
        (
            {
                "model": "minilm",
                "text": "hello",
                "max_length": 5,
                "pad_to_max_length": True,
                "padding_side": "left",
            },
            [0, 0, 101, 7592, 102],
        ),
        ({"model": "cross", "text": "hello world"}, [7592, 2088]),  # a reranker: no specials
    ],
)
def test_tokenize(call: Call, request_body: dict[str, object], tokens: list[object]) -> None:
    status, body = call("POST", "/v3/tokenize", request_body)
    assert (status, body) == (200, {"tokens": tokens})


@pytest.mark.parametrize(
    ("request_body", "message"),
    [
        ({"model": "minilm"}, "text field is required"),
        ({"model": "minilm", "text": "a", "max_length": 0}, "max_length should be greater than 0"),
        (
            {"model": "minilm", "text": "a", "max_length": "x"},
            "max_length should be unsigned integer",
        ),
        (
            {"model": "minilm", "text": "a", "padding_side": "up"},
            "padding_side should be either left or right",
        ),
        (
            {"model": "minilm", "text": "a", "add_special_tokens": 1},
            "add_special_tokens should be boolean",
        ),
        (  # once a MemoryError (500); a max_length of 10**9 filled the server's memory
            {"model": "minilm", "text": "a", "max_length": 2**40, "pad_to_max_length": True},
            f"pad_to_max_length to max_length {2**40} makes {2**40} token ids, more than the "
            "limit of 67108864",
        ),
        (  # the padded rows of every text count
            {
                "model": "minilm",
                "text": ["a", "b"],
                "max_length": 2**25 + 1,
                "pad_to_max_length": True,
            },
            f"pad_to_max_length to max_length {2**25 + 1} makes {2**26 + 2} token ids, more "
            "than the limit of 67108864",
        ),
    ],
)
def test_tokenize_errors(call: Call, request_body: dict[str, object], message: str) -> None:
    status, body = call("POST", "/v3/tokenize", request_body)
    assert status == 400 and body["error"]["message"] == message


def test_a_big_max_length_without_padding_only_cuts(call: Call) -> None:
    body = {"model": "minilm", "text": "hello", "max_length": 2**40}
    assert call("POST", "/v3/tokenize", body) == (200, {"tokens": [101, 7592, 102]})


def test_metrics_use_ovms_v3_names(app: App, call: Call) -> None:
    call("POST", "/v3/embeddings", {"model": "minilm", "input": "counted"})
    call("POST", "/v3/embeddings", {"model": "minilm", "input": 5})
    text = app.handle(make_request("GET", "/metrics")).body.decode()
    labels = 'api="V3",interface="REST",method="Unary",name="minilm"'
    for family in (
        "ovms_requests_success",
        "ovms_requests_fail",
        "ovms_requests_accepted",
        "ovms_responses",
        "ovms_graph_error",
    ):
        assert f"{family}{{{labels}" in text, family
    assert 'ovms_current_graphs{name="minilm"} 0' in text
