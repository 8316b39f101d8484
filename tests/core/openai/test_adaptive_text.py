"""Adaptive execution (core.runtime.adaptive) on text models: a concurrent host compiles a rerank
model for LATENCY and then THROUGHPUT, unless its graph.pbtxt plugin_config sets a hint (OVMS's
meaning: one compile); both variants score the same."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from core import metrics
from core.api import App, make_request
from core.config import Settings
from core.serving.model import ModelVersion
from core.serving.registry import ModelManager
from demo.bert_export import export, minilm_source
from tests.core.openai.conftest import CROSS_CONFIG, Repo
from tests.reload.helpers import wait_for

QUERY = "what is served"
DOCS = ["a model server answers requests", "bananas are yellow", "OpenVINO runs models"]


@pytest.fixture
def app(text_repo: Repo, tmp_path: Path) -> Iterator[App]:
    tuned = export(
        minilm_source(),
        tmp_path / "tuned",
        "rerank",
        weights=text_repo.cross_weights,
        config=CROSS_CONFIG,
        max_allowed_chunks=20,
        plugin_config='{"PERFORMANCE_HINT": "LATENCY"}',
    )
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "model_config_list": [
                    {"config": {"name": "ad-cross", "base_path": str(text_repo.cross.parent)}},
                    {"config": {"name": "ad-tuned", "base_path": str(tuned.parent)}},
                ]
            }
        )
    )
    settings = Settings(config_path=str(config), cache_dir=str(tmp_path / "cache"), concurrent=True)
    app = App(ModelManager.start(settings), settings)
    yield app
    for served in app.manager.models.values():
        for version in served.versions.values():
            version.retire(grace=0)


def rerank(app: App, model: str) -> list[float]:
    body = json.dumps({"model": model, "query": QUERY, "documents": DOCS}).encode()
    response = app.handle(
        make_request("POST", "/v3/rerank", body, {"content-type": "application/json"})
    )
    assert response.status == 200, response.body
    results = sorted(json.loads(response.body)["results"], key=lambda r: r["index"])
    return [r["relevance_score"] for r in results]


def test_a_rerank_model_adapts_unless_its_graph_sets_a_hint(app: App) -> None:
    adaptive: ModelVersion = app.manager.models["ad-cross"].versions[1]
    tuned: ModelVersion = app.manager.models["ad-tuned"].versions[1]
    lone = rerank(app, "ad-cross")
    wait_for(
        lambda: adaptive.variants == ("latency", "throughput"),
        "the throughput variant",
        timeout_s=60,
    )
    with adaptive.serving():  # another request in flight: the throughput variant answers
        crowded = rerank(app, "ad-cross")
    np.testing.assert_allclose(crowded, lone, rtol=1e-4, atol=1e-5)
    assert metrics.VARIANT_REQUESTS.labels("ad-cross", "1", "throughput").value >= 1
    rerank(app, "ad-tuned")
    tuned._export_gate.wait(5)
    assert tuned.variants == ("fixed",)
