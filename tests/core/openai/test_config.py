"""Task fields in config.json, the single-model flags and OVS_* env, and graph.pbtxt parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import Settings, parse_config
from core.errors import ConfigError, ServingError
from core.openai import options
from demo.bert_export import graph_pbtxt
from handlers.cli import _parser, _settings


def entry(**fields: object) -> bytes:
    import json

    return json.dumps(
        {"model_config_list": [{"config": {"name": "m", "base_path": "/models/m", **fields}}]}
    ).encode()


def test_config_entry_task_fields() -> None:
    model = parse_config(entry(task="rerank", max_allowed_chunks=50)).models[0]
    assert model.task == "rerank" and model.task_options == {"max_allowed_chunks": 50}
    model = parse_config(
        entry(
            task="embeddings",
            pooling="mean",
            normalize="false",
            truncate=True,
            max_allowed_inputs=8,
        )
    ).models[0]
    assert model.task_options == {
        "pooling": "MEAN",
        "normalize": False,
        "truncate": True,
        "max_allowed_inputs": 8,
    }


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"task": "chat"},
            "model_config_list[0].config.task: expected one of , embeddings, rerank, got 'chat'",
        ),
        (
            {"task": "embeddings", "pooling": "MAX"},
            "model_config_list[0].config.pooling: expected one of CLS, LAST, MEAN, got 'MAX'",
        ),
        (
            {"pooling": "CLS"},
            "model_config_list[0].config: pooling need a task (embeddings or rerank)",
        ),
        (
            {"task": "rerank", "max_allowed_chunks": 0},
            "model_config_list[0].config.max_allowed_chunks: must be >= 1, got 0",
        ),
    ],
)
def test_config_entry_errors(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(entry(**fields))
    assert caught.value.message == message


def test_flags_and_env() -> None:
    args = _parser().parse_args(
        [
            "serve",
            "--model_name",
            "m",
            "--model_path",
            "/m",
            "--task",
            "rerank",
            "--max_allowed_chunks",
            "7",
        ]
    )
    model = _settings(args).server_config().models[0]
    assert (model.task, model.task_options) == ("rerank", {"max_allowed_chunks": 7})
    env = {
        "OVS_MODEL_NAME": "m",
        "OVS_MODEL_PATH": "/m",
        "OVS_TASK": "embeddings",
        "OVS_POOLING": "LAST",
        "OVS_NORMALIZE": "false",
        "OVS_MAX_ALLOWED_INPUTS": "9",
    }
    model = Settings.from_env(env).server_config().models[0]
    assert model.task_options == {"pooling": "LAST", "normalize": False, "max_allowed_inputs": 9}
    with pytest.raises(ConfigError, match="exclusive with the config file: task"):
        Settings.from_env({"OVS_CONFIG_PATH": "/c.json", "OVS_TASK": "rerank"}).server_config()


def test_graph_options_as_ovms_export_writes_them(tmp_path: Path) -> None:
    (tmp_path / "graph.pbtxt").write_text(
        graph_pbtxt(
            "embeddings",
            normalize_embeddings=False,
            truncate=True,
            pooling="LAST",
            plugin_config='{"NUM_STREAMS": "1"}',
        )
    )
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 128, "pad_token_id": 1}')
    found = options.read(tmp_path, "", {})
    assert (
        found.task,
        found.pooling,
        found.normalize,
        found.truncate,
        found.context,
        found.pad_token,
        dict(found.plugin_config),
    ) == ("embeddings", "LAST", False, True, 128, 1, {"NUM_STREAMS": "1"})
    assert options.read(tmp_path, "", {"normalize": True, "pooling": "CLS"}).pooling == "CLS"


def test_pooling_from_sentence_transformers(tmp_path: Path) -> None:
    (tmp_path / "1_Pooling").mkdir()
    pooling = tmp_path / "1_Pooling" / "config.json"
    pooling.write_text('{"pooling_mode_mean_tokens": true, "pooling_mode_cls_token": false}')
    assert options.read(tmp_path, "embeddings", {}).pooling == "MEAN"
    pooling.write_text('{"pooling_mode_max_tokens": true}')  # unsupported: OVMS's default
    assert options.read(tmp_path, "embeddings", {}).pooling == "CLS"


@pytest.mark.parametrize(
    ("graph", "message"),
    [
        ('node { calculator: "HttpLLMCalculator" }', "found: HttpLLMCalculator"),
        (
            'node { calculator: "EmbeddingsCalculatorOV" node_options: { [x]: { models_path: '
            '"/elsewhere" } } }',
            "models_path must be the graph's own folder",
        ),
        (
            'node { calculator: "RerankCalculatorOV" node_options: { [x]: { cache_size: 10 } } }',
            "option cache_size is not supported here",
        ),
        (
            'node { calculator: "RerankCalculatorOV" node_options: { [x]: { plugin_config: '
            '{"A": 1} } } }',
            "cannot read the node options near",
        ),
    ],
)
def test_graphs_refused(tmp_path: Path, graph: str, message: str) -> None:
    (tmp_path / "graph.pbtxt").write_text(graph)
    with pytest.raises(ServingError, match=message):
        options.read(tmp_path, "", {})
