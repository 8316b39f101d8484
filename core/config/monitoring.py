"""What /metrics serves: OVMS's --metrics_enable / --metrics_list, or a config file's
`monitoring.metrics` block."""

from __future__ import annotations

import re
from typing import Any

from core.config.fields import boolean, reject_unknown, require_object, text
from core.config.objects import METRICS_PATH, MetricsConfig
from core.errors import ConfigError


def metrics_from_flags(enable: bool | None, listed: str) -> MetricsConfig:
    """--metrics_enable / --metrics_list "a,b" (OVMS's flags); enable None: not given."""
    names = tuple(name.strip() for name in listed.split(",") if name.strip())
    if names and not enable:  # OVMS's rule and text
        raise ConfigError(
            "metrics_enable setting is missing, required when metrics_list is provided"
        )
    return MetricsConfig(enable is not False, _families(names, "metrics_list"))


def metrics_config(monitoring: Any, fallback: MetricsConfig) -> MetricsConfig:
    if monitoring is None:
        return fallback
    require_object(monitoring, "monitoring")
    reject_unknown(monitoring, {"metrics"}, "monitoring")
    if "metrics" not in monitoring:
        return fallback
    metrics = monitoring["metrics"]
    require_object(metrics, "monitoring.metrics")
    reject_unknown(metrics, {"enable", "metrics_list", "endpoint_path"}, "monitoring.metrics")
    listed = metrics.get("metrics_list", [])
    if not isinstance(listed, list) or not all(isinstance(n, str) for n in listed):
        raise ConfigError("monitoring.metrics.metrics_list: expected a list of metric names")
    path = text(metrics.get("endpoint_path", METRICS_PATH), "monitoring.metrics.endpoint_path")
    if not re.fullmatch(r"/[a-zA-Z0-9]*", path):
        raise ConfigError(
            f"monitoring.metrics.endpoint_path: {path!r} is not a valid endpoint "
            "path: '/' then letters and digits only"
        )
    return MetricsConfig(
        boolean(metrics.get("enable", False), "monitoring.metrics.enable"),
        _families(tuple(listed), "monitoring.metrics.metrics_list"),
        path,
    )


def _families(names: tuple[str, ...], path: str) -> tuple[str, ...]:
    if not names:
        return ()
    from core.metrics import known_families

    known = known_families()
    for name in names:
        if name not in known:
            raise ConfigError(f"{path}: Metrics family name not supported: {name}")
    return tuple(dict.fromkeys(names))
