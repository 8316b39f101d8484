"""The frozen objects a configuration becomes: one model, the model list, what /metrics serves."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core.config.pipelines import LibraryConfig, PipelineConfig
from core.tensors.shapes import Dim, ShapeSpec

METRICS_PATH = "/metrics"


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


DEFAULT_METRICS = MetricsConfig()


@dataclass(frozen=True)
class ServerConfig:
    models: tuple[ModelConfig, ...]
    source: str = ""  # the config file it came from, or "" for flags/env
    metrics: MetricsConfig = MetricsConfig()
    pipelines: tuple[PipelineConfig, ...] = ()
    libraries: tuple[LibraryConfig, ...] = ()
