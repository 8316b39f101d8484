"""Prometheus metrics with OVMS's names (ovms_requests_success, ovms_request_time_us, ...):
the observation API the data plane and the servables call.

`track`, `graph` and `inference` count and time a request around the caller's work;
`exposition()` writes the text format of every family or of a metrics_list. Cold-start stage
durations (`ov_serverless_cold_start_seconds`) are read from the manager's and each model
version's `timings` at scrape time, so loading code needs no metrics hook. The format library
is core/metrics/prometheus.py, the families core/metrics/families.py; their names are
re-exported here, so callers keep `from core import metrics; metrics.REQUESTS_SUCCESS`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from core.errors import InvalidInputError, ModelNotFoundError, VersionNotFoundError
from core.metrics.families import (
    AUTO_RELOADS,
    BATCH_SIZE,
    COLD_START,
    CURRENT_GRAPHS,
    CURRENT_REQUESTS,
    GRAPH_ACCEPTED,
    GRAPH_ERROR,
    GRAPH_REJECTED,
    GRAPH_RESPONSES,
    INFER_REQ_ACTIVE,
    INFER_REQ_QUEUE_SIZE,
    INFERENCE_TIME,
    REQUEST_TIME,
    REQUESTS_FAIL,
    REQUESTS_SUCCESS,
    STREAMS,
    VARIANT_REQUESTS,
    WAIT_FOR_INFER_REQ,
)
from core.metrics.prometheus import (
    CONTENT_TYPE,
    REGISTRY,
    Counter,
    Family,
    Gauge,
    Histogram,
    Snapshot,
    render,
    restore,
    snapshot,
)

__all__ = [
    "AUTO_RELOADS",
    "BATCH_SIZE",
    "COLD_START",
    "CONTENT_TYPE",
    "CURRENT_GRAPHS",
    "CURRENT_REQUESTS",
    "GRAPH_ACCEPTED",
    "GRAPH_ERROR",
    "GRAPH_REJECTED",
    "GRAPH_RESPONSES",
    "INFERENCE_TIME",
    "INFER_REQ_ACTIVE",
    "INFER_REQ_QUEUE_SIZE",
    "REGISTRY",
    "REQUESTS_FAIL",
    "REQUESTS_SUCCESS",
    "REQUEST_TIME",
    "STREAMS",
    "VARIANT_REQUESTS",
    "WAIT_FOR_INFER_REQ",
    "Counter",
    "Family",
    "Gauge",
    "Histogram",
    "Snapshot",
    "Track",
    "exposition",
    "graph",
    "inference",
    "known_families",
    "record_timings",
    "render",
    "restore",
    "snapshot",
    "track",
]


class Track:
    """One request being counted: its labels, and the version once it is resolved."""

    def __init__(
        self, api: str, interface: str, method: str, name: str, version: int | None
    ) -> None:
        self.labels = (api, interface, method, name)
        self.version = version


@contextmanager
def inference(name: str, version: int) -> Iterator[None]:
    """Count one inference in flight and time it; the caller runs the servable inside."""
    labels = (name, str(version))
    current = CURRENT_REQUESTS.labels(*labels)
    current.inc()
    started = time.perf_counter()
    try:
        yield
    finally:
        current.dec()
    INFERENCE_TIME.labels(*labels).observe((time.perf_counter() - started) * 1e6)


@contextmanager
def graph(interface: str, name: str) -> Iterator[None]:
    """One request to a text model, counted as OVMS counts a MediaPipe graph's (api "V3",
    method "Unary"): request success/fail, accepted, responses or graph errors, in process."""
    labels = ("V3", interface, "Unary", name)
    with track(*labels, None):
        GRAPH_ACCEPTED.labels(*labels).inc()
        current = CURRENT_GRAPHS.labels(name)
        current.inc()
        try:
            yield
        except InvalidInputError:
            GRAPH_ERROR.labels(*labels).inc()
            raise
        else:
            GRAPH_RESPONSES.labels(*labels).inc()
        finally:
            current.dec()


@contextmanager
def track(api: str, interface: str, method: str, name: str, version: int | None) -> Iterator[Track]:
    """Count one request as success or failure and time it."""
    record = Track(api, interface, method, name, version)
    started = time.perf_counter()
    try:
        yield record
    except Exception as exc:
        labels, version = record.labels, record.version
        if isinstance(exc, ModelNotFoundError | VersionNotFoundError):
            version = None  # never a label per made-up version number
        if isinstance(exc, ModelNotFoundError):  # nor per made-up name
            labels = (*labels[:3], "")
        REQUESTS_FAIL.labels(*labels, _v(version)).inc()
        raise
    else:
        REQUESTS_SUCCESS.labels(*record.labels, _v(record.version)).inc()
        if method in ("Predict", "ModelInfer"):
            REQUEST_TIME.labels(interface, name, _v(record.version)).observe(
                (time.perf_counter() - started) * 1e6
            )


def _v(version: int | None) -> str:
    return "" if version is None else str(version)


def record_timings(manager: Any) -> None:
    """Copy ModelManager.timings and every ModelVersion/Pipeline .timings into COLD_START."""
    for stage, seconds in list(getattr(manager, "timings", {}).items()):
        COLD_START.labels(stage, "", "").set(seconds)
    served = [
        *list(getattr(manager, "models", {}).values()),
        *list(getattr(manager, "pipelines", {}).values()),
    ]
    for model in served:
        for number, version in list(getattr(model, "versions", {}).items()):
            for stage, seconds in list(getattr(version, "timings", {}).items()):
                COLD_START.labels(stage, model.name, str(number)).set(seconds)


def known_families() -> frozenset[str]:
    """Names a metrics_list may hold."""
    return frozenset(family.name for family in REGISTRY)


def exposition(manager: Any = None, families: Iterable[str] = ()) -> tuple[bytes, str]:
    """The Prometheus text format with OVMS's exact sample names: of `families` only (a
    metrics_list), or of every metric."""
    if manager is not None:
        record_timings(manager)
    wanted = frozenset(families)
    served = [f for f in REGISTRY if f.name in wanted] if wanted else REGISTRY
    return render(served), CONTENT_TYPE
