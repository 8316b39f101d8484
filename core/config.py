"""OVMS-compatible configuration: config.json, single-model flags and OVS_* env -> frozen objects.

Every problem is reported as a ConfigError naming the JSON path of the offending field, e.g.
`model_config_list[0].config.nireq: expected a non-negative integer, got "x"`.
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from core.cors import CorsConfig
from core.errors import ConfigError, StorageError
from core.pipeline_config import LibraryConfig, PipelineConfig, parse_libraries, parse_pipelines
from core.runtime import devices
from core.tensors.limits import Limits
from core.tensors.shapes import Dim, ShapeSpec, parse_batch, parse_shape

LAMBDA_PAYLOAD_LIMIT = 6 * 1024 * 1024 - 64 * 1024  # leave room for the event envelope
DEFAULT_MAX_REQUEST_BYTES = 64 * 1024 * 1024
DEFAULT_CACHE_DIR = "/tmp/ov-cache"
DEFAULT_LIMITS = Limits()
METRICS_PATH = "/metrics"

log = logging.getLogger("ov_serverless.config")


@dataclass(frozen=True, slots=True)
class VersionPolicy:
    kind: str = "latest"  # all | latest | specific
    num_versions: int = 1
    versions: tuple[int, ...] = ()

    def select(self, available: list[int]) -> list[int]:
        """The versions to serve out of those present in the repository."""
        ordered = sorted(available)
        if self.kind == "all":
            return ordered
        if self.kind == "specific":
            return [v for v in ordered if v in self.versions]
        return ordered[-self.num_versions :]


@dataclass(frozen=True)
class BatchingConfig:
    """Server-side dynamic batching of one model (core.runtime.batching)."""

    max_batch_size: int = 8
    window_us: int = 2000


@dataclass(frozen=True)
class ModelConfig:
    name: str
    base_path: str
    batch_size: Dim | str | None = None  # str: only ever "auto"
    shape: ShapeSpec = None
    layout: str | dict[str, str] | None = None
    version_policy: VersionPolicy = VersionPolicy()
    nireq: int = 0
    target_device: str = "CPU"
    plugin_config: Mapping[str, Any] = field(default_factory=dict)
    allow_cache: bool = True
    color_format: str = "BGR"  # jpeg/png decode order; OVMS decodes with OpenCV (BGR)
    stateful: bool = False
    max_sequence_number: int = 500
    idle_sequence_cleanup: bool = True
    low_latency_transformation: bool = False
    dynamic_batching: BatchingConfig | None = None
    # OVMS's input preprocessing: (x - mean) / scale, a number or one value per channel
    mean: float | tuple[float, ...] | None = None
    scale: float | tuple[float, ...] | None = None
    precision: tuple[str, str] | None = None  # "<request>:<model>", e.g. ("u8", "f32")
    # an OpenAI-API text model (core.openai): "embeddings" | "rerank", and its options
    # (pooling, normalize, truncate, max_allowed_chunks, max_allowed_inputs)
    task: str = ""
    task_options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class MetricsConfig:
    """What /metrics serves: config.json's `monitoring.metrics` (enable, metrics_list,
    endpoint_path), else --metrics_enable / --metrics_list (OVS_METRICS_ENABLE /
    OVS_METRICS_LIST). Unlike OVMS, metrics are on when nothing is said: a scrape is the only
    window into a serverless instance. An explicit config block follows OVMS: `enable`
    defaults to false there."""

    enabled: bool = True
    families: tuple[str, ...] = ()  # metrics_list: only these; () = every family
    path: str = METRICS_PATH


@dataclass(frozen=True)
class ServerConfig:
    models: tuple[ModelConfig, ...]
    source: str = ""  # the config file it came from, or "" for flags/env
    metrics: MetricsConfig = MetricsConfig()
    pipelines: tuple[PipelineConfig, ...] = ()
    libraries: tuple[LibraryConfig, ...] = ()


@dataclass(frozen=True)
class Settings:
    """Process-wide settings: where the models are and how this process serves them."""

    config_path: str | None = None
    model_name: str | None = None
    model_path: str | None = None
    model_options: Mapping[str, Any] = field(default_factory=dict)  # single-model knobs
    cache_dir: str = DEFAULT_CACHE_DIR
    lazy_load: bool = False
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    base_path: str = ""  # URL prefix stripped before routing (API Gateway stage, mapping)
    reload_interval: float = 0.0
    log_level: str = "INFO"
    limits: Limits = Limits()
    # Many requests at once (`ov-serverless serve`: REST threads + gRPC; Cloud Run with
    # OVS_CONCURRENT=1) or one at a time (Lambda, Azure, functions-framework by default):
    # picks the compile defaults (THROUGHPUT streams vs LATENCY) and whether compiled blobs
    # are written back. `serve` sets it; OVS_CONCURRENT=0/1 overrides.
    concurrent: bool = False
    compiled_cache: tuple[str, ...] = ()  # read-only compiled-blob folders (OVS_COMPILED_CACHE)
    # Write compiled blobs to <cache_dir>/blobs (OVS_EXPORT_BLOBS=0/1); None: when concurrent,
    # except on Cloud Run (K_SERVICE), whose filesystem is memory: a blob there costs the
    # instance its size in RAM and is gone with it.
    export_blobs: bool | None = None
    metrics: MetricsConfig = MetricsConfig()  # flags/env; a config file's monitoring wins
    cors: CorsConfig = CorsConfig()  # OVMS's --allowed_origins & co.; OVS_ALLOWED_* env
    cpu_extension: str = ""  # a library of custom operations (OVS_CPU_EXTENSION)
    # stateful models: a sequence idle this long is dropped (OVMS's
    # --sequence_cleaner_poll_wait_minutes; 0: never)
    sequence_cleaner_minutes: float = 5.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        env = os.environ if env is None else env
        options: dict[str, Any] = {}
        for key in ("batch_size", "shape", "layout", "target_device", "model_version_policy",
                    "mean", "scale", "precision"):
            if f"OVS_{key.upper()}" in env:
                options[key] = env[f"OVS_{key.upper()}"]
        if "OVS_NIREQ" in env:
            options["nireq"] = _env_int(env, "OVS_NIREQ")
        for key in ("plugin_config", "dynamic_batching"):
            if f"OVS_{key.upper()}" in env:
                options[key] = _json_env(env, f"OVS_{key.upper()}")
        options.update(_task_env(env))
        if isinstance(options.get("model_version_policy"), str):
            options["model_version_policy"] = _json_env(env, "OVS_MODEL_VERSION_POLICY")
        on_lambda = "AWS_LAMBDA_FUNCTION_NAME" in env
        default_limit = LAMBDA_PAYLOAD_LIMIT if on_lambda else DEFAULT_MAX_REQUEST_BYTES
        settings = cls(
            config_path=env.get("OVS_CONFIG_PATH") or None,
            model_name=env.get("OVS_MODEL_NAME") or None,
            model_path=env.get("OVS_MODEL_PATH") or None,
            model_options=options,
            cache_dir=env.get("OVS_CACHE_DIR", DEFAULT_CACHE_DIR),
            lazy_load=bool(_env_bool(env, "OVS_LAZY_LOAD")),
            max_request_bytes=_env_int(env, "OVS_MAX_REQUEST_BYTES", default_limit),
            base_path=env.get("OVS_BASE_PATH", "").rstrip("/"),
            reload_interval=option_float(env.get("OVS_RELOAD_INTERVAL") or "0",
                                         "OVS_RELOAD_INTERVAL"),
            log_level=env.get("OVS_LOG_LEVEL", "INFO").upper(),
            concurrent=bool(_env_bool(env, "OVS_CONCURRENT")),
            compiled_cache=tuple(p for p in env.get("OVS_COMPILED_CACHE", "").split(":") if p),
            export_blobs=_export_blobs(env),
            metrics=metrics_from_flags(_env_bool(env, "OVS_METRICS_ENABLE"),
                                       env.get("OVS_METRICS_LIST", "")),
            cors=cors_from_env(env),
            cpu_extension=env.get("OVS_CPU_EXTENSION", ""),
            sequence_cleaner_minutes=minutes_setting(
                env.get("OVS_SEQUENCE_CLEANER_POLL_WAIT_MINUTES", "5"),
                "OVS_SEQUENCE_CLEANER_POLL_WAIT_MINUTES"),
            limits=Limits(
                max_tensor_elements=_env_int(env, "OVS_MAX_TENSOR_ELEMENTS",
                                             DEFAULT_LIMITS.max_tensor_elements),
                max_tensor_bytes=_env_int(env, "OVS_MAX_TENSOR_BYTES",
                                          DEFAULT_LIMITS.max_tensor_bytes),
                max_image_pixels=_env_int(env, "OVS_MAX_IMAGE_PIXELS",
                                          DEFAULT_LIMITS.max_image_pixels),
            ),
        )
        return replace(settings, **overrides)

    def server_config(self) -> ServerConfig:
        """Read the config file, or build the single-model config from flags/env."""
        if self.config_path and (self.model_path or self.model_name):
            raise ConfigError("Use either config_path or model_path with model_name")
        if self.config_path and self.model_options:  # OVMS exits on these too
            raise ConfigError(
                "Model parameters in CLI are exclusive with the config file: "
                f"{', '.join(sorted(self.model_options))} (set them per model in the config)")
        if self.config_path:
            return load_config_file(self.config_path, self.metrics)
        if self.model_path:
            entry = {"name": self.model_name or _default_name(self.model_path),
                     "base_path": self.model_path, **self.model_options}
            return ServerConfig((parse_model_config(entry, "model"),), metrics=self.metrics)
        if self.model_name:
            raise ConfigError("model_path is required with model_name")
        raise ConfigError(
            "No models configured: set --config_path or --model_name/--model_path "
            "(env OVS_CONFIG_PATH or OVS_MODEL_NAME/OVS_MODEL_PATH)"
        )


def _default_name(path: str) -> str:
    return posixpath.basename(path.rstrip("/")) or "model"


def _task_env(env: Mapping[str, str]) -> dict[str, Any]:
    """OVS_TASK, OVS_POOLING, OVS_NORMALIZE, OVS_TRUNCATE, OVS_MAX_ALLOWED_CHUNKS,
    OVS_MAX_ALLOWED_INPUTS: the single-model form of a text model's task options."""
    return {key: env[f"OVS_{key.upper()}"] for key in ("task", *_TASK_KEYS)
            if env.get(f"OVS_{key.upper()}")}


def _export_blobs(env: Mapping[str, str]) -> bool | None:
    if "OVS_EXPORT_BLOBS" in env:
        return option_bool(env["OVS_EXPORT_BLOBS"] or "0", "OVS_EXPORT_BLOBS")
    return False if "K_SERVICE" in env else None


def minutes_setting(value: str, name: str) -> float:
    """A non-negative number of minutes (fractions allowed)."""
    try:
        minutes = float(value)
    except ValueError:
        raise ConfigError(f"{name}: expected a number of minutes, got {value!r}") from None
    if not minutes >= 0:
        raise ConfigError(f"{name}: must be >= 0, got {value}")
    return minutes


def _env_bool(env: Mapping[str, str], key: str) -> bool | None:
    return option_bool(env[key], key) if env.get(key) else None


# One validation for a value given as a flag (`name`: --flag) or an env variable (OVS_...)


def option_bool(text: str, name: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes"):
        return True
    if value in ("0", "false", "no"):
        return False
    raise ConfigError(f"{name}: expected true or false, got {text!r}")


def option_int(text: str, name: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"{name}: expected an integer, got {text!r}") from None


def option_float(text: str, name: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{name}: expected a number, got {text!r}") from None


def option_json(text: str, name: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{name}: not valid JSON: {exc}") from None


def cors_from_env(env: Mapping[str, str], origins: str | None = None,
                  methods: str | None = None, headers: str | None = None,
                  credentials: bool | None = None) -> CorsConfig:
    """OVS_ALLOWED_ORIGINS, OVS_ALLOWED_METHODS, OVS_ALLOWED_HEADERS and
    OVS_ALLOW_CREDENTIALS, each overridden by its flag (--allowed_origins, ...) when given."""
    if credentials is None:
        credentials = bool(_env_bool(env, "OVS_ALLOW_CREDENTIALS"))
    return CorsConfig.from_flags(
        env.get("OVS_ALLOWED_ORIGINS", "*") if origins is None else origins,
        env.get("OVS_ALLOWED_METHODS", "*") if methods is None else methods,
        env.get("OVS_ALLOWED_HEADERS", "*") if headers is None else headers,
        credentials)


def metrics_from_flags(enable: bool | None, listed: str) -> MetricsConfig:
    """--metrics_enable / --metrics_list "a,b" (OVMS's flags); enable None: not given."""
    names = tuple(name.strip() for name in listed.split(",") if name.strip())
    if names and not enable:  # OVMS's rule and text
        raise ConfigError("metrics_enable setting is missing, required when metrics_list is "
                          "provided")
    return MetricsConfig(enable is not False, _families(names, "metrics_list"))


def _metrics_config(monitoring: Any, fallback: MetricsConfig) -> MetricsConfig:
    if monitoring is None:
        return fallback
    _require_object(monitoring, "monitoring")
    _reject_unknown(monitoring, {"metrics"}, "monitoring")
    if "metrics" not in monitoring:
        return fallback
    metrics = monitoring["metrics"]
    _require_object(metrics, "monitoring.metrics")
    _reject_unknown(metrics, {"enable", "metrics_list", "endpoint_path"}, "monitoring.metrics")
    listed = metrics.get("metrics_list", [])
    if not isinstance(listed, list) or not all(isinstance(n, str) for n in listed):
        raise ConfigError("monitoring.metrics.metrics_list: expected a list of metric names")
    path = _str(metrics.get("endpoint_path", METRICS_PATH), "monitoring.metrics.endpoint_path")
    if not re.fullmatch(r"/[a-zA-Z0-9]*", path):
        raise ConfigError(f"monitoring.metrics.endpoint_path: {path!r} is not a valid endpoint "
                          "path: '/' then letters and digits only")
    return MetricsConfig(_bool(metrics.get("enable", False), "monitoring.metrics.enable"),
                         _families(tuple(listed), "monitoring.metrics.metrics_list"), path)


def _families(names: tuple[str, ...], path: str) -> tuple[str, ...]:
    if not names:
        return ()
    from core.metrics import known_families

    known = known_families()
    for name in names:
        if name not in known:
            raise ConfigError(f"{path}: Metrics family name not supported: {name}")
    return tuple(dict.fromkeys(names))


def _env_int(env: Mapping[str, str], key: str, default: int = 0) -> int:
    return option_int(env[key], key) if key in env else default


def _json_env(env: Mapping[str, str], key: str) -> Any:
    return option_json(env[key], key)


# -- config.json -------------------------------------------------------------------------------

_TOP_KEYS = {"model_config_list", "pipeline_config_list", "custom_node_library_config_list",
             "monitoring"}
_MODEL_KEYS = {"name", "base_path", "batch_size", "shape", "layout", "model_version_policy",
               "nireq", "target_device", "plugin_config", "allow_cache", "color_format",
               "stateful", "max_sequence_number", "idle_sequence_cleanup",
               "low_latency_transformation", "dynamic_batching", "mean", "scale", "precision",
               "task", "pooling", "normalize", "truncate", "max_allowed_chunks",
               "max_allowed_inputs"}
_TASK_KEYS = ("pooling", "normalize", "truncate", "max_allowed_chunks", "max_allowed_inputs")


def load_config_file(path: str, metrics: MetricsConfig = MetricsConfig()) -> ServerConfig:
    """`metrics`: what /metrics serves when the file has no `monitoring.metrics`."""
    from core.storage import read_file

    try:
        raw = read_file(path)
    except OSError as exc:
        raise ConfigError(f"Config file not found or cannot open: {path}: {exc}") from exc
    except StorageError as exc:
        raise ConfigError(f"Config file not found or cannot open: {exc.message}") from exc
    return parse_config(raw, path, metrics)


def parse_config(raw: bytes, source: str = "", metrics: MetricsConfig = MetricsConfig()
                 ) -> ServerConfig:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"Configuration file is not a valid JSON file: {source}: {exc}") from exc
    _require_object(doc, "$")
    _reject_unknown(doc, _TOP_KEYS, "$")
    entries = doc.get("model_config_list")
    if not isinstance(entries, list):
        raise ConfigError("model_config_list: required, must be a list")
    base_dir = _dirname(source)
    models: list[ModelConfig] = []
    for index, entry in enumerate(entries):
        path = f"model_config_list[{index}]"
        _require_object(entry, path)
        _reject_unknown(entry, {"config"}, path)
        model = parse_model_config(entry.get("config"), f"{path}.config", base_dir)
        if any(m.name == model.name for m in models):
            raise ConfigError(f"{path}.config.name: model name {model.name!r} is duplicated")
        models.append(model)
    pipelines = parse_pipelines(doc.get("pipeline_config_list", []), "pipeline_config_list")
    libraries = parse_libraries(doc.get("custom_node_library_config_list", []),
                                "custom_node_library_config_list",
                                lambda path: _resolve(base_dir, path))
    for index, pipeline in enumerate(pipelines):
        if any(m.name == pipeline.name for m in models):
            raise ConfigError(f"pipeline_config_list[{index}].name: Pipeline name: "
                              f"{pipeline.name} is already occupied by model")
    return ServerConfig(tuple(models), source, _metrics_config(doc.get("monitoring"), metrics),
                        pipelines, libraries)


def parse_model_config(entry: Any, path: str, base_dir: str = "") -> ModelConfig:
    _require_object(entry, path)
    _reject_unknown(entry, _MODEL_KEYS, path)
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
            base_path=_resolve(base_dir, base_path),
            batch_size=parse_batch(entry.get("batch_size"), f"{path}.batch_size"),
            shape=parse_shape(entry.get("shape"), f"{path}.shape"),
            layout=_layout(entry.get("layout"), f"{path}.layout"),
            version_policy=parse_version_policy(
                entry.get("model_version_policy"), f"{path}.model_version_policy"),
            nireq=_int(entry.get("nireq", 0), f"{path}.nireq", minimum=0),
            target_device=devices.check(_str(entry.get("target_device", "CPU"),
                                             f"{path}.target_device"), f"{path}.target_device"),
            plugin_config=modern_plugin_config(
                _plugin_config(entry.get("plugin_config", {}), f"{path}.plugin_config"),
                f"{path}.plugin_config", name),
            allow_cache=_bool(entry.get("allow_cache", True), f"{path}.allow_cache"),
            color_format=_choice(entry.get("color_format", "BGR"), ("RGB", "BGR"),
                                 f"{path}.color_format"),
            stateful=_bool(entry.get("stateful", False), f"{path}.stateful"),
            max_sequence_number=_int(entry.get("max_sequence_number", 500),
                                     f"{path}.max_sequence_number", minimum=1),
            idle_sequence_cleanup=_bool(entry.get("idle_sequence_cleanup", True),
                                        f"{path}.idle_sequence_cleanup"),
            low_latency_transformation=_bool(entry.get("low_latency_transformation", False),
                                             f"{path}.low_latency_transformation"),
            dynamic_batching=_batching(entry.get("dynamic_batching"), f"{path}.dynamic_batching"),
            mean=float_or_floats(entry.get("mean"), f"{path}.mean"),
            scale=float_or_floats(entry.get("scale"), f"{path}.scale"),
            precision=_precision(entry.get("precision"), f"{path}.precision"),
            task=_choice(entry.get("task", ""), ("", "embeddings", "rerank"), f"{path}.task"),
            task_options=_task_options(entry, path),
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if model.stateful and _auto_batch(model) | _auto_shape(model):  # OVMS's rule and text
        raise ConfigError(f"{path}: Dynamic shape and dynamic batch size are not supported for "
                          "stateful models (batch_size / shape auto)")
    if model.dynamic_batching is not None and _auto_batch(model) | _auto_shape(model):
        raise ConfigError(f"{path}.dynamic_batching: needs a dynamic batch dimension; use "
                          "batch_size -1 (or a range), not auto")
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
    raise ConfigError(f"{path}: expected a number or a list of numbers (one per channel), "
                      f"got {value!r}")


# OVMS's precision names -> OpenVINO element types
_PRECISIONS = {"BF16": "bf16", "FP64": "f64", "FP32": "f32", "FP16": "f16", "INT64": "i64",
               "INT32": "i32", "INT16": "i16", "INT8": "i8", "INT4": "i4", "UINT64": "u64",
               "UINT32": "u32", "UINT16": "u16", "UINT8": "u8", "UINT4": "u4", "UINT1": "u1"}


def _precision(value: Any, path: str) -> tuple[str, str] | None:
    """OVMS's "<request precision>:<model precision>", e.g. "UINT8:FP32" -> ("u8", "f32")."""
    if value is None or value == "":
        return None
    request, sep, model = str(value).upper().partition(":")
    if not isinstance(value, str) or not sep or request not in _PRECISIONS \
            or model not in _PRECISIONS:
        raise ConfigError(f"{path}: expected <request precision>:<model precision> of "
                          f"{', '.join(_PRECISIONS)}, got {value!r}")
    return _PRECISIONS[request], _PRECISIONS[model]


def _auto_notices(model: ModelConfig) -> None:
    """OVMS's warnings for "auto": it still works (core.runtime.auto_shape), at a compile per
    change."""
    if _auto_batch(model):
        _notice_once(model.name, "batch_size", "Batch size auto is deprecated. Use model "
                     "dynamic shapes instead (batch_size -1 or a range)")
    if _auto_shape(model):
        _notice_once(model.name, "shape", "Shape auto is deprecated. Use model dynamic "
                     "shapes instead (-1 or a range in the shape)")


def parse_version_policy(value: Any, path: str) -> VersionPolicy:
    if value is None:
        return VersionPolicy()
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            raise ConfigError(f"{path}: Model version policy is in wrong format") from None
    if not isinstance(value, dict) or len(value) != 1:
        raise ConfigError(f"{path}: Model version policy is in wrong format; expected exactly "
                          'one of {"all": {}}, {"latest": {...}}, {"specific": {...}}')
    ((kind, body),) = value.items()
    if kind not in ("all", "latest", "specific") or not isinstance(body, dict):
        raise ConfigError(f"{path}: Model version policy contains unsupported key: {kind}")
    if kind == "all":
        _reject_unknown(body, set(), f"{path}.all")
        return VersionPolicy("all")
    if kind == "latest":
        _reject_unknown(body, {"num_versions"}, f"{path}.latest")
        count = _int(body.get("num_versions", 1), f"{path}.latest.num_versions", minimum=1)
        return VersionPolicy("latest", num_versions=count)
    _reject_unknown(body, {"versions"}, f"{path}.specific")
    versions = body.get("versions")
    if not isinstance(versions, list) or not versions:
        raise ConfigError(f"{path}.specific.versions: required, a non-empty list")
    picked = tuple(_int(v, f"{path}.specific.versions[{i}]", minimum=1)
                   for i, v in enumerate(versions))
    return VersionPolicy("specific", versions=picked)


def _dirname(source: str) -> str:
    if "://" in source:
        return source.rsplit("/", 1)[0] if "/" in source.split("://", 1)[1] else source
    return str(Path(source).parent) if source else ""


def _resolve(base_dir: str, base_path: str) -> str:
    """OVMS resolves a relative base_path against the config file's folder."""
    if "://" in base_path or os.path.isabs(base_path) or not base_dir:
        return base_path
    if "://" in base_dir:
        return posixpath.normpath(f"{base_dir}/{base_path}").replace(":/", "://", 1)
    return os.path.normpath(os.path.join(base_dir, base_path))


def _require_object(value: Any, path: str) -> None:
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(value).__name__}")


def _reject_unknown(value: dict[str, Any], allowed: set[str], path: str) -> None:
    unknown = sorted(set(value) - allowed)
    if unknown:
        where = unknown[0] if path == "$" else f"{path}.{unknown[0]}"
        raise ConfigError(f"{where}: unknown field (JSON schema parse error)")


def _int(value: Any, path: str, minimum: int | None = None) -> int:
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{path}: expected an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{path}: must be >= {minimum}, got {value}")
    return value


def _bool(value: Any, path: str) -> bool:
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise ConfigError(f"{path}: expected true or false, got {value!r}")
    return value


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{path}: expected a non-empty string, got {value!r}")
    return value


def _choice(value: Any, options: tuple[str, ...], path: str) -> str:
    if value not in options:
        raise ConfigError(f"{path}: expected one of {', '.join(options)}, got {value!r}")
    return str(value)


def _layout(value: Any, path: str) -> str | dict[str, str] | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        return dict(value)
    raise ConfigError(f"{path}: expected a layout string or a map of input name to layout")


def _batching(value: Any, path: str) -> BatchingConfig | None:
    """{"max_batch_size": N >= 2, "window_us": microseconds}; null or absent: off."""
    if value is None:
        return None
    _require_object(value, path)
    _reject_unknown(value, {"max_batch_size", "window_us"}, path)
    default = BatchingConfig()
    return BatchingConfig(
        _int(value.get("max_batch_size", default.max_batch_size), f"{path}.max_batch_size",
             minimum=2),
        _int(value.get("window_us", default.window_us), f"{path}.window_us", minimum=0))


def _task_options(entry: dict[str, Any], path: str) -> dict[str, Any]:
    """A text model's options given in the config entry (or flags / env)."""
    options: dict[str, Any] = {}
    if entry.get("pooling") is not None:
        options["pooling"] = _choice(str(entry["pooling"]).upper(), ("CLS", "LAST", "MEAN"),
                                     f"{path}.pooling")
    for key in ("normalize", "truncate"):
        if entry.get(key) is not None:
            options[key] = _bool(entry[key], f"{path}.{key}")
    for key in ("max_allowed_chunks", "max_allowed_inputs"):
        if entry.get(key) is not None:
            options[key] = _int(entry[key], f"{path}.{key}", minimum=1)
    if options and not entry.get("task"):
        raise ConfigError(f"{path}: {', '.join(options)} need a task (embeddings or rerank)")
    return options


def _plugin_config(value: Any, path: str) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            raise ConfigError(f"{path}: not valid JSON") from None
    _require_object(value, path)
    for key, item in value.items():
        if not isinstance(item, (str, int, float, bool)):
            raise ConfigError(f"{path}.{key}: expected a string, number or boolean")
    return dict(value)


# -- legacy plugin_config keys -------------------------------------------------------------------
# OpenVINO 2.0 dropped the 1.0 keys that OVMS configs still carry; OVMS renames them before it
# compiles (src/json_parser.cpp): *_THROUGHPUT_STREAMS "<dev>_THROUGHPUT_AUTO" -> PERFORMANCE_HINT
# THROUGHPUT, a number -> NUM_STREAMS, CPU_THREADS_NUM -> INFERENCE_NUM_THREADS. CPU_BIND_THREAD
# OVMS passed through for OpenVINO to map, which it did onto ENABLE_CPU_PINNING (YES and
# HYBRID_AWARE pin threads to cores; NUMA and NO do not); OpenVINO now rejects the old key.

_STREAMS_KEYS = {"CPU_THROUGHPUT_STREAMS": "CPU_THROUGHPUT_AUTO",
                 "GPU_THROUGHPUT_STREAMS": "GPU_THROUGHPUT_AUTO"}
_BIND_THREAD = {"YES": True, "HYBRID_AWARE": True, "NUMA": False, "NO": False}
_noticed: set[tuple[str, str]] = set()  # (model, key): a reload does not repeat the notice


def modern_plugin_config(config: Mapping[str, Any], path: str, model: str) -> dict[str, Any]:
    """`config` with legacy keys renamed as OVMS renames them; a later key wins, as in OVMS."""
    modern: dict[str, Any] = {}
    for key, value in config.items():
        new_key, new_value = _modern_property(key, value, f"{path}.{key}")
        if new_key != key:
            _deprecation_notice(model, key, new_key)
        modern[new_key] = new_value
    return modern


def _modern_property(key: str, value: Any, path: str) -> tuple[str, Any]:
    if key in _STREAMS_KEYS and not isinstance(value, bool):
        if value == _STREAMS_KEYS[key]:
            return "PERFORMANCE_HINT", "THROUGHPUT"
        return "NUM_STREAMS", value
    if key == "CPU_THREADS_NUM":
        return "INFERENCE_NUM_THREADS", value
    if key == "CPU_BIND_THREAD":
        pinning = _BIND_THREAD.get(str(value).upper())
        if pinning is None:
            raise ConfigError(f"{path}: expected one of {', '.join(_BIND_THREAD)}, got {value!r}")
        return "ENABLE_CPU_PINNING", pinning
    return key, value


def _deprecation_notice(model: str, key: str, new_key: str) -> None:
    _notice_once(model, key, f"{key} plugin config key is deprecated. Use {new_key} instead")


def _notice_once(model: str, key: str, message: str) -> None:
    if (model, key) not in _noticed:
        _noticed.add((model, key))
        log.warning("%s (model %s)", message, model)
