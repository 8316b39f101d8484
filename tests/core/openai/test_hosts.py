"""The OpenAI routes through every host: `ov-serverless serve` (with the official `openai`
client and a raw Cohere-format rerank call), the functions-framework CLI, the Lambda handler
(API Gateway HTTP API v2 event) and the Azure Functions handler; and the single-model CLI / env
form (`--task embeddings --pooling ...`)."""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import azure.functions as func
import numpy as np
import pytest
import requests

import core.api
from core.api import App, make_request
from core.config import Settings
from core.serving.registry import ModelManager
from handlers import aws_lambda, azure_functions
from handlers.cli import _parser, _settings
from tests.core.openai.conftest import Call, Direct, Repo, cosine
from tests.handlers.conftest import (
    AzureContext,
    LambdaContext,
    ff_command,
    free_port,
    load_event,
    reply_body,
    running,
)

BIN = Path(sys.executable).parent
SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "A man is riding a horse.",
]
EMBED = {"model": "minilm", "input": SENTENCES}
RERANK = {
    "model": "cross",
    "query": "what do pandas eat",
    "top_n": 2,
    "return_documents": True,
    "documents": ["Pandas eat bamboo.", "Stocks fell.", "Bread recipes."],
}


def _vectors(body: dict[str, Any]) -> np.ndarray:
    return np.array([d["embedding"] for d in body["data"]], dtype=np.float32)


@pytest.fixture(scope="module")
def expected(call: Call) -> dict[str, Any]:
    """What the App answers in-process: every host must answer the same."""
    return {
        "embeddings": call("POST", "/v3/embeddings", EMBED)[1],
        "rerank": call("POST", "/v3/rerank", RERANK)[1],
    }


@pytest.fixture(scope="module")
def servers(text_repo: Repo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    ports = {"server": free_port(), "cloud_run": free_port()}
    commands = {
        "server": (
            [
                str(BIN / "ov-serverless"),
                "serve",
                "--rest_port",
                str(ports["server"]),
                "--config_path",
                str(text_repo.config),
                "--log_level",
                "WARNING",
            ],
            ports["server"],
        ),
        "cloud_run": (ff_command(ports["cloud_run"]), ports["cloud_run"]),
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("OVS_")} | text_repo.env()
    with running(commands, env, tmp_path_factory.mktemp("openai-logs"), timeout=180):
        yield {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}


def test_openai_client_float_and_base64(servers: dict[str, str], expected: dict[str, Any]) -> None:
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=servers["server"] + "/v3", api_key="unused")
    want = _vectors(expected["embeddings"])
    floats = client.embeddings.create(model="minilm", input=SENTENCES, encoding_format="float")
    assert np.array_equal(np.array([d.embedding for d in floats.data], np.float32), want)
    assert floats.usage.prompt_tokens == expected["embeddings"]["usage"]["prompt_tokens"]
    assert floats.model == "minilm"
    packed = client.embeddings.create(model="minilm", input=SENTENCES, encoding_format="base64")
    raw = [d.embedding for d in packed.data]
    decoded = [
        np.frombuffer(base64.b64decode(r), "<f4") if isinstance(r, str) else np.array(r, np.float32)
        for r in raw
    ]
    assert np.array_equal(np.stack(decoded), want)
    default = client.embeddings.create(model="minilm", input="A man is eating food.")
    assert np.allclose(default.data[0].embedding, want[0], atol=1e-7)
    listed = client.models.list()
    assert [m.id for m in listed.data] == ["minilm", "cross", "scaler"]
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="absent", input="x")
    with pytest.raises(openai.BadRequestError, match="Input length"):
        client.embeddings.create(model="minilm", input="word " * 600)


def test_openai_client_base_url_v1(servers: dict[str, str], expected: dict[str, Any]) -> None:
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=servers["server"] + "/v1", api_key="unused")
    result = client.embeddings.create(model="minilm", input=SENTENCES, encoding_format="float")
    assert np.array_equal(
        np.array([d.embedding for d in result.data], np.float32), _vectors(expected["embeddings"])
    )


def test_langchain_openai_embeddings(servers: dict[str, str], expected: dict[str, Any]) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    embedder = langchain_openai.OpenAIEmbeddings(
        model="minilm",
        base_url=servers["server"] + "/v3",
        api_key="unused",
        check_embedding_ctx_length=False,
    )  # no tiktoken: the server tokenizes
    got = np.array(embedder.embed_documents(SENTENCES), np.float32)
    assert np.allclose(got, _vectors(expected["embeddings"]), atol=1e-6)
    assert np.allclose(embedder.embed_query(SENTENCES[0]), got[0], atol=1e-6)


def test_raw_cohere_rerank_call(servers: dict[str, str], expected: dict[str, Any]) -> None:
    for base in servers.values():
        reply = requests.post(base + "/v3/rerank", json=RERANK, timeout=60)
        assert reply.status_code == 200, reply.text
        assert reply.headers["content-type"].startswith("application/json")
        assert reply.json() == expected["rerank"]
        assert [r["document"]["text"] for r in reply.json()["results"]][0] in RERANK["documents"]


def test_functions_framework(servers: dict[str, str], expected: dict[str, Any]) -> None:
    reply = requests.post(servers["cloud_run"] + "/v3/embeddings", json=EMBED, timeout=60)
    assert reply.status_code == 200 and reply.json() == expected["embeddings"]
    reply = requests.post(
        servers["cloud_run"] + "/v3/embeddings", json={"model": "minilm"}, timeout=60
    )
    assert reply.status_code == 400 and reply.json()["error"]["type"] == "invalid_request_error"


@pytest.fixture
def text_env(text_repo: Repo, monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for key in [k for k in os.environ if k.startswith("OVS_")] + ["AWS_LAMBDA_FUNCTION_NAME"]:
        monkeypatch.delenv(key, raising=False)
    for key, value in text_repo.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(core.api, "_default_app", None)
    return monkeypatch


def test_lambda_http_api_v2(text_env: pytest.MonkeyPatch, expected: dict[str, Any]) -> None:
    handler = aws_lambda.build()
    for path, body, key in (
        ("/v3/embeddings", EMBED, "embeddings"),
        ("/v1/rerank", RERANK, "rerank"),
    ):
        event = load_event(
            "powertools/apiGatewayProxyV2Event", path, json.dumps(body), method="POST"
        )
        reply = handler(event, LambdaContext())
        assert reply["statusCode"] == 200, reply
        assert json.loads(reply_body(reply)) == expected[key]
    event = load_event("powertools/apiGatewayProxyV2Event", "/v3/models", method="GET")
    reply = handler(event, LambdaContext())
    assert [m["id"] for m in json.loads(reply_body(reply))["data"]] == ["minilm", "cross", "scaler"]


def test_azure_functions(text_env: pytest.MonkeyPatch, expected: dict[str, Any]) -> None:
    (function,) = azure_functions.build().get_functions()
    for path, body, key in (
        ("/v3/embeddings", EMBED, "embeddings"),
        ("/v3/rerank", RERANK, "rerank"),
    ):
        request = func.HttpRequest(
            "POST",
            f"https://ovs.azurewebsites.net{path}",
            body=json.dumps(body).encode(),
            headers={"content-type": "application/json"},
            route_params={"path": path[1:]},
        )
        response = function.get_user_function()(request, AzureContext())
        assert response.status_code == 200
        assert json.loads(response.get_body()) == expected[key]


def test_single_model_cli_form(text_repo: Repo, minilm_direct: Direct) -> None:
    """`--task embeddings --pooling CLS --normalize false` override graph.pbtxt and
    1_Pooling: the served vector is the raw [CLS] hidden state."""
    args = _parser().parse_args(
        [
            "serve",
            "--model_name",
            "mini",
            "--model_path",
            str(text_repo.minilm.parent),
            "--task",
            "embeddings",
            "--pooling",
            "CLS",
            "--normalize",
            "false",
            "--plugin_config",
            '{"INFERENCE_PRECISION_HINT": "f32"}',
        ]
    )
    settings = _settings(args)
    app = App(ModelManager.start(settings), settings)
    reply = app.handle(
        make_request(
            "POST", "/v3/embeddings", json.dumps({"model": "mini", "input": SENTENCES}).encode()
        )
    )
    served = _vectors(json.loads(reply.body))
    ids, mask = minilm_direct.tokens(SENTENCES)
    cls = minilm_direct.run(ids, mask)[:, 0]
    assert np.abs(served - cls).max() < 1e-4
    assert abs(float(np.linalg.norm(served[0])) - 1) > 0.1  # not normalised


def test_env_form_truncates(text_repo: Repo) -> None:
    env = {
        "OVS_MODEL_NAME": "mini",
        "OVS_MODEL_PATH": str(text_repo.minilm.parent),
        "OVS_TASK": "embeddings",
        "OVS_TRUNCATE": "true",
        "OVS_CACHE_DIR": "/tmp/ovs-i34",
    }
    settings = Settings.from_env(env)
    app = App(ModelManager.start(settings), settings)
    long_text = "word " * 600
    reply = app.handle(
        make_request(
            "POST",
            "/v3/embeddings",
            json.dumps({"model": "mini", "input": [long_text, "x"]}).encode(),
        )
    )
    assert reply.status == 200, reply.body
    body = json.loads(reply.body)
    assert body["usage"]["prompt_tokens"] == 512 + 3
    short = app.handle(
        make_request(
            "POST", "/v3/embeddings", json.dumps({"model": "mini", "input": "word " * 510}).encode()
        )
    )
    a, b = _vectors(body)[0], _vectors(json.loads(short.body))[0]
    assert cosine(a, b) > 0.999  # 510 words + [CLS] [SEP]: what truncation keeps
