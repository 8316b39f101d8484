"""One model's entry of an OVMS config.json (`model_config_list[i].config`), also the
single-model form built from flags and env."""

from __future__ import annotations

from typing import Any

import orjson

from core.config.fields import (
    boolean,
    choice,
    integer,
    reject_unknown,
    require_object,
    resolve,
    text,
)
from core.config.notices import notice_once
from core.config.objects import BatchingConfig, ModelConfig, VersionPolicy
from core.config.options import option_json
from core.config.plugin_config import modern_plugin_config
from core.errors import ConfigError
from core.runtime import devices
from core.tensors.shapes import parse_batch, parse_shape

MODEL_KEYS = {
    "name",
    "base_path",
    "batch_size",
    "shape",
    "layout",
    "model_version_policy",
    "nireq",
    "target_device",
    "plugin_config",
    "allow_cache",
    "color_format",
    "stateful",
    "max_sequence_number",
    "idle_sequence_cleanup",
    "low_latency_transformation",
    "dynamic_batching",
    "mean",
    "scale",
    "precision",
    "task",
    "pooling",
    "normalize",
    "truncate",
    "max_allowed_chunks",
    "max_allowed_inputs",
}


def parse_model_config(entry: Any, path: str, base_dir: str = "") -> ModelConfig:
    require_object(entry, path)
    reject_unknown(entry, MODEL_KEYS, path)
    name = entry.get("name")
    if not isinstance(name, str) or not name or "/" in name or ":" in name or len(name) > 255:
        raise ConfigError(f"{path}.name: required, a non-empty name without '/' or ':'")
    base_path = entry.get("base_path")
    if not isinstance(base_path, str) or not base_path:
        raise ConfigError(f"{path}.base_path: required, a path or bucket URL")
    if entry.get("stateful") is True and entry.get("dynamic_batching") is not None:
        raise ConfigError(f"{path}.dynamic_batching: not available for stateful models")
    try:
        model = ModelConfig(
            name=name,
            base_path=resolve(base_dir, base_path),
            batch_size=parse_batch(entry.get("batch_size"), f"{path}.batch_size"),
            shape=parse_shape(entry.get("shape"), f"{path}.shape"),
            layout=_layout(entry.get("layout"), f"{path}.layout"),
            version_policy=parse_version_policy(
                entry.get("model_version_policy"), f"{path}.model_version_policy"
            ),
            nireq=integer(entry.get("nireq", 0), f"{path}.nireq", minimum=0),
            target_device=devices.check(
                text(entry.get("target_device", "CPU"), f"{path}.target_device"),
                f"{path}.target_device",
            ),
            plugin_config=modern_plugin_config(
                _plugin_config(entry.get("plugin_config", {}), f"{path}.plugin_config"),
                f"{path}.plugin_config",
                name,
            ),
            allow_cache=boolean(entry.get("allow_cache", True), f"{path}.allow_cache"),
            color_format=choice(
                entry.get("color_format", "BGR"), ("RGB", "BGR"), f"{path}.color_format"
            ),
            stateful=boolean(entry.get("stateful", False), f"{path}.stateful"),
            max_sequence_number=integer(
                entry.get("max_sequence_number", 500), f"{path}.max_sequence_number", minimum=1
            ),
            idle_sequence_cleanup=boolean(
                entry.get("idle_sequence_cleanup", True), f"{path}.idle_sequence_cleanup"
            ),
            low_latency_transformation=boolean(
                entry.get("low_latency_transformation", False), f"{path}.low_latency_transformation"
            ),
            dynamic_batching=_batching(entry.get("dynamic_batching"), f"{path}.dynamic_batching"),
            mean=float_or_floats(entry.get("mean"), f"{path}.mean"),
            scale=float_or_floats(entry.get("scale"), f"{path}.scale"),
            precision=_precision(entry.get("precision"), f"{path}.precision"),
            task=choice(entry.get("task", ""), ("", "embeddings", "rerank"), f"{path}.task"),
            task_options=_task_options(entry, path),
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if model.stateful and _auto_batch(model) | _auto_shape(model):  # OVMS's rule and text
        raise ConfigError(
            f"{path}: Dynamic shape and dynamic batch size are not supported for "
            "stateful models (batch_size / shape auto)"
        )
    if model.dynamic_batching is not None and _auto_batch(model) | _auto_shape(model):
        raise ConfigError(
            f"{path}.dynamic_batching: needs a dynamic batch dimension; use "
            "batch_size -1 (or a range), not auto"
        )
    _auto_notices(model)
    return model


def _auto_batch(model: ModelConfig) -> bool:
    return model.batch_size == "auto"


def _auto_shape(model: ModelConfig) -> bool:
    shape = model.shape
    return shape == "auto" or (isinstance(shape, dict) and "auto" in shape.values())


def float_or_floats(value: Any, path: str) -> float | tuple[float, ...] | None:
    """OVMS's mean / scale: 0.5, [1, 2, 3], or those written as a string ("[1,2,3]",
    "(1,2,3)")."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        text = value.replace(" ", "")
        bracketed = text[:1] + text[-1:] in ("[]", "()")
        value = text[1:-1].split(",") if bracketed else text
    try:
        if isinstance(value, list) and value and not any(isinstance(v, bool) for v in value):
            return tuple(float(v) for v in value)
        if not isinstance(value, (bool, list)):
            return float(value)
    except (TypeError, ValueError):
        pass
    raise ConfigError(
        f"{path}: expected a number or a list of numbers (one per channel), got {value!r}"
    )


# OVMS's precision names -> OpenVINO element types
_PRECISIONS = {
    "BF16": "bf16",
    "FP64": "f64",
    "FP32": "f32",
    "FP16": "f16",
    "INT64": "i64",
    "INT32": "i32",
    "INT16": "i16",
    "INT8": "i8",
    "INT4": "i4",
    "UINT64": "u64",
    "UINT32": "u32",
    "UINT16": "u16",
    "UINT8": "u8",
    "UINT4": "u4",
    "UINT1": "u1",
}


def _precision(value: Any, path: str) -> tuple[str, str] | None:
    """OVMS's "<request precision>:<model precision>", e.g. "UINT8:FP32" -> ("u8", "f32")."""
    if value is None or value == "":
        return None
    request, sep, model = str(value).upper().partition(":")
    if (
        not isinstance(value, str)
        or not sep
        or request not in _PRECISIONS
        or model not in _PRECISIONS
    ):
        raise ConfigError(
            f"{path}: expected <request precision>:<model precision> of "
            f"{', '.join(_PRECISIONS)}, got {value!r}"
        )
    return _PRECISIONS[request], _PRECISIONS[model]


def _auto_notices(model: ModelConfig) -> None:
    """OVMS's warnings for "auto": it still works (core.runtime.auto_shape), at a compile
    per change."""
    if _auto_batch(model):
        notice_once(
            model.name,
            "batch_size",
            "Batch size auto is deprecated. Use model "
            "dynamic shapes instead (batch_size -1 or a range)",
        )
    if _auto_shape(model):
        notice_once(
            model.name,
            "shape",
            "Shape auto is deprecated. Use model dynamic "
            "shapes instead (-1 or a range in the shape)",
        )


def parse_version_policy(value: Any, path: str) -> VersionPolicy:
    if value is None:
        return VersionPolicy()
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            raise ConfigError(f"{path}: Model version policy is in wrong format") from None
    if not isinstance(value, dict) or len(value) != 1:
        raise ConfigError(
            f"{path}: Model version policy is in wrong format; expected exactly "
            'one of {"all": {}}, {"latest": {...}}, {"specific": {...}}'
        )
    ((kind, body),) = value.items()
    if kind not in ("all", "latest", "specific") or not isinstance(body, dict):
        raise ConfigError(f"{path}: Model version policy contains unsupported key: {kind}")
    if kind == "all":
        reject_unknown(body, set(), f"{path}.all")
        return VersionPolicy("all")
    if kind == "latest":
        reject_unknown(body, {"num_versions"}, f"{path}.latest")
        count = integer(body.get("num_versions", 1), f"{path}.latest.num_versions", minimum=1)
        return VersionPolicy("latest", num_versions=count)
    reject_unknown(body, {"versions"}, f"{path}.specific")
    versions = body.get("versions")
    if not isinstance(versions, list) or not versions:
        raise ConfigError(f"{path}.specific.versions: required, a non-empty list")
    picked = tuple(
        integer(v, f"{path}.specific.versions[{i}]", minimum=1) for i, v in enumerate(versions)
    )
    return VersionPolicy("specific", versions=picked)


def _layout(value: Any, path: str) -> str | dict[str, str] | None:
    """A layout, or a map of input/output name to layout: an object in config.json, its JSON
    text on the command line (`--layout '{"in1": "NHWC:NCHW"}'`, as OVMS takes it)."""
    if isinstance(value, str) and value.strip().startswith("{"):
        value = option_json(value, path)
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        return dict(value)
    raise ConfigError(f"{path}: expected a layout string or a map of input name to layout")


def _batching(value: Any, path: str) -> BatchingConfig | None:
    """{"max_batch_size": N >= 2, "window_us": microseconds}; null or absent: off."""
    if value is None:
        return None
    require_object(value, path)
    reject_unknown(value, {"max_batch_size", "window_us"}, path)
    default = BatchingConfig()
    return BatchingConfig(
        integer(
            value.get("max_batch_size", default.max_batch_size), f"{path}.max_batch_size", minimum=2
        ),
        integer(value.get("window_us", default.window_us), f"{path}.window_us", minimum=0),
    )


def _task_options(entry: dict[str, Any], path: str) -> dict[str, Any]:
    """A text model's options given in the config entry (or flags / env)."""
    options: dict[str, Any] = {}
    if entry.get("pooling") is not None:
        options["pooling"] = choice(
            str(entry["pooling"]).upper(), ("CLS", "LAST", "MEAN"), f"{path}.pooling"
        )
    for key in ("normalize", "truncate"):
        if entry.get(key) is not None:
            options[key] = boolean(entry[key], f"{path}.{key}")
    for key in ("max_allowed_chunks", "max_allowed_inputs"):
        if entry.get(key) is not None:
            options[key] = integer(entry[key], f"{path}.{key}", minimum=1)
    if options and not entry.get("task"):
        raise ConfigError(f"{path}: {', '.join(options)} need a task (embeddings or rerank)")
    return options


def _plugin_config(value: Any, path: str) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            raise ConfigError(f"{path}: not valid JSON") from None
    require_object(value, path)
    for key, item in value.items():
        if not isinstance(item, (str, int, float, bool)):
            raise ConfigError(f"{path}.{key}: expected a string, number or boolean")
    return dict(value)
