"""An OVMS config.json: its models, pipelines, custom node libraries and monitoring block.

Every problem is reported as a ConfigError naming the JSON path of the offending field, e.g.
`model_config_list[0].config.nireq: expected a non-negative integer, got "x"`.
"""

from __future__ import annotations

import orjson

from core.config.fields import dirname, reject_unknown, require_object, resolve
from core.config.model_entry import parse_model_config
from core.config.monitoring import metrics_config
from core.config.objects import DEFAULT_METRICS, MetricsConfig, ModelConfig, ServerConfig
from core.config.pipelines import parse_libraries, parse_pipelines
from core.errors import ConfigError, StorageError

_TOP_KEYS = {
    "model_config_list",
    "pipeline_config_list",
    "custom_node_library_config_list",
    "monitoring",
}


def load_config_file(path: str, metrics: MetricsConfig = DEFAULT_METRICS) -> ServerConfig:
    """`metrics`: what /metrics serves when the file has no `monitoring.metrics`."""
    from core.storage import read_file

    try:
        raw = read_file(path)
    except OSError as exc:
        raise ConfigError(f"Config file not found or cannot open: {path}: {exc}") from exc
    except StorageError as exc:
        raise ConfigError(f"Config file not found or cannot open: {exc.message}") from exc
    return parse_config(raw, path, metrics)


def parse_config(
    raw: bytes, source: str = "", metrics: MetricsConfig = DEFAULT_METRICS
) -> ServerConfig:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"Configuration file is not a valid JSON file: {source}: {exc}") from exc
    require_object(doc, "$")
    reject_unknown(doc, _TOP_KEYS, "$")
    entries = doc.get("model_config_list")
    if not isinstance(entries, list):
        raise ConfigError("model_config_list: required, must be a list")
    base_dir = dirname(source)
    models: list[ModelConfig] = []
    for index, entry in enumerate(entries):
        path = f"model_config_list[{index}]"
        require_object(entry, path)
        reject_unknown(entry, {"config"}, path)
        model = parse_model_config(entry.get("config"), f"{path}.config", base_dir)
        if any(m.name == model.name for m in models):
            raise ConfigError(f"{path}.config.name: model name {model.name!r} is duplicated")
        models.append(model)
    pipelines = parse_pipelines(doc.get("pipeline_config_list", []), "pipeline_config_list")
    libraries = parse_libraries(
        doc.get("custom_node_library_config_list", []),
        "custom_node_library_config_list",
        lambda path: resolve(base_dir, path),
    )
    for index, pipeline in enumerate(pipelines):
        if any(m.name == pipeline.name for m in models):
            raise ConfigError(
                f"pipeline_config_list[{index}].name: Pipeline name: "
                f"{pipeline.name} is already occupied by model"
            )
    return ServerConfig(
        tuple(models), source, metrics_config(doc.get("monitoring"), metrics), pipelines, libraries
    )
