"""Legacy plugin_config keys renamed as OVMS renames them before it compiles.

OpenVINO 2.0 dropped the 1.0 keys that OVMS configs still carry; OVMS renames them
(src/json_parser.cpp): *_THROUGHPUT_STREAMS "<dev>_THROUGHPUT_AUTO" -> PERFORMANCE_HINT
THROUGHPUT, a number -> NUM_STREAMS, CPU_THREADS_NUM -> INFERENCE_NUM_THREADS. CPU_BIND_THREAD
OVMS passed through for OpenVINO to map, which it did onto ENABLE_CPU_PINNING (YES and
HYBRID_AWARE pin threads to cores; NUMA and NO do not); OpenVINO now rejects the old key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.config.notices import notice_once
from core.errors import ConfigError

_STREAMS_KEYS = {
    "CPU_THROUGHPUT_STREAMS": "CPU_THROUGHPUT_AUTO",
    "GPU_THROUGHPUT_STREAMS": "GPU_THROUGHPUT_AUTO",
}
_BIND_THREAD = {"YES": True, "HYBRID_AWARE": True, "NUMA": False, "NO": False}


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
    notice_once(model, key, f"{key} plugin config key is deprecated. Use {new_key} instead")
