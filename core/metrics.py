"""Prometheus metrics with OVMS's names (ovms_requests_success, ovms_request_time_us, ...).

prometheus-client would expose counters as `<name>_total` plus `<name>_created`; OVMS exposes
`ovms_requests_success` as is, so `exposition()` writes the text format itself from the
registry's families: counters under their bare name, no `_created` samples, and the `version`
label left out where it is empty (status/ready, as in OVMS's docs/metrics_output.out).
Cold-start stage durations (`ov_serverless_cold_start_seconds`) are read from the manager's and
each model version's `timings` at scrape time, so loading code needs no metrics hook.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

from core.errors import ModelNotFoundError

REGISTRY = CollectorRegistry(auto_describe=True)
_LABELS = ("api", "interface", "method", "name", "version")
_BUCKETS_US = (100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,
               1000000, 2500000, 5000000, 10000000)

REQUESTS_SUCCESS = Counter("ovms_requests_success", "Number of successful requests",
                           _LABELS, registry=REGISTRY)
REQUESTS_FAIL = Counter("ovms_requests_fail", "Number of failed requests", _LABELS,
                        registry=REGISTRY)
REQUEST_TIME = Histogram("ovms_request_time_us", "Processing time of requests to a model",
                         ("api", "interface", "name", "version"), buckets=_BUCKETS_US,
                         registry=REGISTRY)
INFERENCE_TIME = Histogram("ovms_inference_time_us", "Inference execution time in the model",
                           ("name", "version"), buckets=_BUCKETS_US, registry=REGISTRY)
WAIT_FOR_INFER_REQ = Histogram("ovms_wait_for_infer_req_time_us",
                               "Time a request waited for a free infer request",
                               ("name", "version"), buckets=_BUCKETS_US, registry=REGISTRY)
STREAMS = Gauge("ovms_streams", "Number of OpenVINO execution streams", ("name", "version"),
                registry=REGISTRY)
INFER_REQ_QUEUE_SIZE = Gauge("ovms_infer_req_queue_size", "Infer request pool size (nireq)",
                             ("name", "version"), registry=REGISTRY)
INFER_REQ_ACTIVE = Gauge("ovms_infer_req_active", "Infer requests in use", ("name", "version"),
                         registry=REGISTRY)
CURRENT_REQUESTS = Gauge("ovms_current_requests", "Number of requests being processed",
                         registry=REGISTRY)
COLD_START = Gauge("ov_serverless_cold_start_seconds",
                   "Cold-start stage durations (manager: config_apply_s; per version: read_s, "
                   "compile_s)", ("stage", "name", "version"), registry=REGISTRY)


class Track:
    def __init__(self, api: str, interface: str, method: str, name: str,
                 version: int | None) -> None:
        self.labels = (api, interface, method, name)
        self.version = version

    def infer(self, servable: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        started = time.perf_counter()
        outputs: dict[str, np.ndarray] = servable.infer(inputs)
        INFERENCE_TIME.labels(servable.name, str(servable.version)).observe(
            (time.perf_counter() - started) * 1e6
        )
        return outputs


@contextmanager
def track(api: str, interface: str, method: str, name: str,
          version: int | None) -> Iterator[Track]:
    """Count one request as success or failure and time it."""
    record = Track(api, interface, method, name, version)
    started = time.perf_counter()
    CURRENT_REQUESTS.inc()
    try:
        yield record
    except Exception as exc:
        labels = record.labels
        if isinstance(exc, ModelNotFoundError):  # never a label per made-up name
            labels = (*labels[:3], "")
        REQUESTS_FAIL.labels(*labels, _v(record.version)).inc()
        raise
    else:
        REQUESTS_SUCCESS.labels(*record.labels, _v(record.version)).inc()
        if method in ("Predict", "ModelInfer"):
            REQUEST_TIME.labels(api, interface, name, _v(record.version)).observe(
                (time.perf_counter() - started) * 1e6
            )
    finally:
        CURRENT_REQUESTS.dec()


def _v(version: int | None) -> str:
    return "" if version is None else str(version)


def record_timings(manager: Any) -> None:
    """Copy ModelManager.timings and every ModelVersion/Pipeline .timings into COLD_START."""
    for stage, seconds in list(getattr(manager, "timings", {}).items()):
        COLD_START.labels(stage, "", "").set(seconds)
    served = [*list(getattr(manager, "models", {}).values()),
              *list(getattr(manager, "pipelines", {}).values())]
    for model in served:
        for number, version in list(getattr(model, "versions", {}).items()):
            for stage, seconds in list(getattr(version, "timings", {}).items()):
                COLD_START.labels(stage, model.name, str(number)).set(seconds)


def exposition(manager: Any = None) -> tuple[bytes, str]:
    """The Prometheus text format of every metric, with OVMS's exact sample names."""
    if manager is not None:
        record_timings(manager)
    return render(REGISTRY.collect()), CONTENT_TYPE_LATEST


def render(families: Iterable[Metric]) -> bytes:
    lines: list[str] = []
    for family in families:
        samples = [s for s in family.samples if not s.name.endswith("_created")]
        lines.append(f"# HELP {family.name} {_escape_help(family.documentation)}")
        lines.append(f"# TYPE {family.name} {family.type}")
        for sample in samples:
            name = sample.name
            if family.type == "counter" and name == family.name + "_total":
                name = family.name
            labels = {k: v for k, v in sample.labels.items() if not (k == "version" and v == "")}
            text = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels.items())
            lines.append(f"{name}{{{text}}} {floatToGoString(sample.value)}" if text
                         else f"{name} {floatToGoString(sample.value)}")
    return ("\n".join(lines) + "\n").encode()


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
