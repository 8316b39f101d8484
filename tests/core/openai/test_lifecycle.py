"""Text models go through the same repository machinery as any model: OVMS's unversioned export
folder, versioned folders with hot reload, lazy load, compiled blobs, limits, refused graphs."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.api import App, make_request
from core.config import Settings
from core.serving.registry import ModelManager
from tests.core.openai.conftest import F32, Direct, Repo

TEXTS = ["A man is eating food.", "A man is riding a horse."]


def link_version(source: Path, dest: Path, **graph: str) -> Path:
    """dest holding source's files (hard links: a symlink out of a base path is refused, and
    copies of the weights would be slow); `graph` replaces graph.pbtxt's options."""
    dest.mkdir(parents=True)
    for path in source.rglob("*"):
        target = dest / path.relative_to(source)
        if path.is_dir():
            target.mkdir(exist_ok=True)
        elif path.name != "graph.pbtxt" or not graph:
            os.link(path, target)
    if graph:
        from demo.bert_export import graph_pbtxt

        (dest / "graph.pbtxt").write_text(graph_pbtxt("embeddings", **graph))
    return dest


def embed(app: App, model: str, texts: list[str] = TEXTS) -> tuple[int, Any]:
    reply = app.handle(
        make_request(
            "POST", "/v3/embeddings", json.dumps({"model": model, "input": texts}).encode()
        )
    )
    return reply.status, json.loads(reply.body)


def vectors(body: dict[str, Any]) -> np.ndarray:
    return np.array([d["embedding"] for d in body["data"]], dtype=np.float32)


def start(tmp_path: Path, **settings: Any) -> App:
    config = Settings(cache_dir=str(tmp_path / "cache"), **settings)
    return App(ModelManager.start(config), config)


@pytest.fixture(scope="module")
def served(app: App) -> np.ndarray:
    return vectors(embed(app, "minilm")[1])


def test_unversioned_export_folder_serves_as_version_1(
    text_repo: Repo, tmp_path: Path, served: np.ndarray
) -> None:
    flat = link_version(text_repo.minilm, tmp_path / "flat")
    app = start(tmp_path, model_name="flat", model_path=str(flat))  # task from graph.pbtxt
    status, body = embed(app, "flat")
    assert status == 200 and np.array_equal(vectors(body), served)
    status_doc = json.loads(app.handle(make_request("GET", "/v1/models/flat")).body)
    assert status_doc["model_version_status"][0]["version"] == "1"


def test_new_version_hot_reloads_with_its_graph_options(
    text_repo: Repo, tmp_path: Path, minilm_direct: Direct, served: np.ndarray
) -> None:
    base = tmp_path / "versions"
    link_version(text_repo.minilm, base / "1")
    app = start(tmp_path, model_name="m", model_path=str(base))
    assert np.array_equal(vectors(embed(app, "m")[1]), served)
    link_version(
        text_repo.minilm, base / "2", pooling="CLS", normalize_embeddings=False, plugin_config=F32
    )
    assert app.manager.reload()
    ids, mask = minilm_direct.tokens(TEXTS)
    assert np.abs(vectors(embed(app, "m")[1]) - minilm_direct.run(ids, mask)[:, 0]).max() < 1e-4
    status_doc = json.loads(app.handle(make_request("GET", "/v1/models/m")).body)
    assert {s["version"]: s["state"] for s in status_doc["model_version_status"]}[
        "2"
    ] == "AVAILABLE"


def test_lazy_load_lists_then_compiles_on_first_request(
    text_repo: Repo, tmp_path: Path, served: np.ndarray
) -> None:
    app = start(tmp_path, config_path=str(text_repo.config), lazy_load=True)
    assert app.manager.models["minilm"].versions[1].status.state.name == "START"
    listed = json.loads(app.handle(make_request("GET", "/v3/models")).body)
    assert "minilm" in [m["id"] for m in listed["data"]]
    status, body = embed(app, "minilm")
    assert status == 200 and np.array_equal(vectors(body), served)
    assert app.manager.models["minilm"].versions[1].available


def test_compiled_blob_is_reused(text_repo: Repo, tmp_path: Path, served: np.ndarray) -> None:
    base = link_version(text_repo.minilm, tmp_path / "blob" / "1").parent
    first = start(tmp_path, model_name="b", model_path=str(base), export_blobs=True)
    assert embed(first, "b")[0] == 200  # the blob is written after the first request
    deadline = time.monotonic() + 120
    while not list((tmp_path / "cache").rglob("*.blob")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list((tmp_path / "cache").rglob("*.blob"))
    second = start(tmp_path, model_name="b", model_path=str(base))
    version = second.manager.get("b")
    assert version.timings["blob_hit"] == 1.0
    assert np.array_equal(vectors(embed(second, "b")[1]), served)


def test_max_allowed_inputs(text_repo: Repo, tmp_path: Path) -> None:
    app = start(
        tmp_path,
        model_name="few",
        model_path=str(text_repo.minilm.parent),
        model_options={"task": "embeddings", "max_allowed_inputs": 2},
    )
    assert embed(app, "few", ["a", "b"])[0] == 200
    status, body = embed(app, "few", ["a", "b", "c"])
    assert status == 400
    assert body["error"]["message"] == "Number of inputs 3 exceeds the allowed maximum of 2"


def test_a_graph_this_server_cannot_run_is_refused_at_load(text_repo: Repo, tmp_path: Path) -> None:
    folder = link_version(text_repo.minilm, tmp_path / "llm" / "1")
    (folder / "graph.pbtxt").unlink()
    (folder / "graph.pbtxt").write_text('node { calculator: "HttpLLMCalculator" }')
    app = start(tmp_path, model_name="llm", model_path=str(folder.parent))
    status = app.manager.models["llm"].versions[1].status
    assert status.error_code == "UNKNOWN"
    assert "found: HttpLLMCalculator" in status.error_message
    assert str(tmp_path) not in status.error_message
    code, body = embed(app, "llm")
    assert code == 404 and "not loaded yet" in body["error"]["message"]


def test_task_and_graph_disagree(text_repo: Repo, tmp_path: Path) -> None:
    app = start(
        tmp_path,
        model_name="x",
        model_path=str(text_repo.minilm.parent),
        model_options={"task": "rerank"},
    )
    message = app.manager.models["x"].versions[1].status.error_message
    assert message == "graph.pbtxt runs embeddings, but the model is configured for task rerank"
