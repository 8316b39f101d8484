"""The OpenAI calls live in the data plane, not in the REST routes: a data plane for another
front answers them with the same bodies and counts them under its own interface label."""

from __future__ import annotations

import json

from core.api import App, make_request
from core.codecs import openai
from core.dataplane import DataPlane
from core.tensors.limits import Limits

EMBED = {"model": "minilm", "input": ["plane", "route"]}
RERANK = {"model": "cross", "query": "a", "documents": ["b", "a c"], "return_documents": True}
TOKENIZE = {"model": "minilm", "text": "tokens here"}


def _route(app: App, path: str, doc: dict[str, object]) -> bytes:
    reply = app.handle(make_request("POST", path, json.dumps(doc).encode()))
    assert reply.status == 200, reply.body
    return reply.body


def test_another_fronts_plane_answers_as_the_routes(app: App) -> None:
    plane = DataPlane(app.manager, "other-front", Limits())
    embedded = plane.embeddings(openai.EmbeddingsCall(json.dumps(EMBED).encode()))
    assert json.loads(embedded) == json.loads(_route(app, "/v3/embeddings", EMBED))
    ranked = plane.rerank(openai.RerankCall(json.dumps(RERANK).encode()))
    assert json.loads(ranked) == json.loads(_route(app, "/v3/rerank", RERANK))
    tokens = plane.tokenize(openai.TokenizeCall(json.dumps(TOKENIZE).encode()))
    assert json.loads(tokens) == json.loads(_route(app, "/v3/tokenize", TOKENIZE))
    assert plane.listed_models() == ["minilm", "cross", "scaler"]

    text = app.handle(make_request("GET", "/metrics")).body.decode()
    labels = 'api="V3",interface="other-front",method="Unary",name="minilm"'
    assert f"ovms_requests_success{{{labels}}} 2" in text  # embeddings and tokenize
    assert f"ovms_responses{{{labels}}} 2" in text
