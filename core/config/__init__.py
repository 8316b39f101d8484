"""OVMS-compatible configuration: config.json, single-model flags and OVS_* env -> frozen objects.

settings.py: Settings, read through table.py (every setting, declared once); config_file.py:
an OVMS config.json; model_entry.py: one model's entry; pipelines.py: pipelines and custom node
libraries; monitoring.py: what /metrics serves; plugin_config.py: legacy OpenVINO keys;
fields.py: the JSON-path validators they share; options.py: flag and env text -> values.
"""

from core.config.config_file import load_config_file, parse_config
from core.config.model_entry import float_or_floats, parse_model_config, parse_version_policy
from core.config.monitoring import metrics_from_flags
from core.config.objects import (
    METRICS_PATH,
    BatchingConfig,
    MetricsConfig,
    ModelConfig,
    ServerConfig,
    VersionPolicy,
)
from core.config.options import (
    minutes_setting,
    option_bool,
    option_float,
    option_int,
    option_json,
)
from core.config.plugin_config import modern_plugin_config
from core.config.settings import (
    DEFAULT_CACHE_DIR,
    DEFAULT_MAX_REQUEST_BYTES,
    LAMBDA_PAYLOAD_LIMIT,
    Settings,
    cors_from_env,
)

__all__ = [
    "DEFAULT_CACHE_DIR",
    "DEFAULT_MAX_REQUEST_BYTES",
    "LAMBDA_PAYLOAD_LIMIT",
    "METRICS_PATH",
    "BatchingConfig",
    "MetricsConfig",
    "ModelConfig",
    "ServerConfig",
    "Settings",
    "VersionPolicy",
    "cors_from_env",
    "float_or_floats",
    "load_config_file",
    "metrics_from_flags",
    "minutes_setting",
    "modern_plugin_config",
    "option_bool",
    "option_float",
    "option_int",
    "option_json",
    "parse_config",
    "parse_model_config",
    "parse_version_policy",
]
