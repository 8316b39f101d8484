"""Prometheus metrics with OVMS's names (ovms_requests_success, ovms_request_time_us, ...).

A small in-house registry instead of prometheus-client: that package's import (http.server,
wsgiref, urllib for its push gateway) cost 27 ms of every cold start, and its counters would be
exposed as `<name>_total` plus `<name>_created` where OVMS exposes `ovms_requests_success` as
is. `exposition()` writes the text format 0.0.4: counters under their bare name, and the
`version` label left out where it is empty (status/ready, as in OVMS's
docs/metrics_output.out). Cold-start stage durations (`ov_serverless_cold_start_seconds`) are
read from the manager's and each model version's `timings` at scrape time, so loading code
needs no metrics hook.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from core.errors import InvalidInputError, ModelNotFoundError

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Value:
    """One counter or gauge sample."""

    def __init__(self) -> None:
        self.value = 0.0
        self._lock = threading.Lock()

    def inc(self, amount: float = 1.0) -> None:
        with self._lock:
            self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.inc(-amount)

    def set(self, value: float) -> None:
        self.value = float(value)

    def samples(self, name: str, labels: dict[str, str]) -> Iterator[tuple[str, dict, float]]:
        yield name, labels, self.value


class Buckets:
    """One histogram: cumulative bucket counts, count and sum, as Prometheus exposes them."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(self.bounds, value)
        with self._lock:
            self.counts[index] += 1
            self.sum += value

    def samples(self, name: str, labels: dict[str, str]) -> Iterator[tuple[str, dict, float]]:
        with self._lock:
            counts, total = list(self.counts), self.sum
        running = 0
        for bound, count in zip((*self.bounds, math.inf), counts, strict=True):
            running += count
            yield f"{name}_bucket", {**labels, "le": _bound(bound)}, running
        yield f"{name}_count", labels, running
        yield f"{name}_sum", labels, total


class Family:
    """A metric name with its label names; `labels(*values)` is the sample to update."""

    def __init__(
        self,
        kind: str,
        name: str,
        documentation: str,
        labelnames: tuple[str, ...] = (),
        buckets: tuple[float, ...] = (),
        registry: list[Family] | None = None,
    ) -> None:
        self.kind, self.name, self.documentation = kind, name, documentation
        self.labelnames = labelnames
        self._buckets = tuple(float(b) for b in buckets)
        self._children: dict[tuple[str, ...], Any] = {}
        self._lock = threading.Lock()
        if not labelnames:
            self._children[()] = self._new()
        (REGISTRY if registry is None else registry).append(self)

    def _new(self) -> Any:
        return Buckets(self._buckets) if self.kind == "histogram" else Value()

    def labels(self, *values: str) -> Any:
        child = self._children.get(values)
        if child is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name} takes labels {self.labelnames}")
            with self._lock:
                child = self._children.setdefault(values, self._new())
        return child

    def inc(self, amount: float = 1.0) -> None:
        self.labels().inc(amount)

    def dec(self, amount: float = 1.0) -> None:
        self.labels().dec(amount)

    def samples(self) -> Iterator[tuple[str, dict, float]]:
        for values, child in list(self._children.items()):
            yield from child.samples(self.name, dict(zip(self.labelnames, values, strict=True)))


def Counter(
    name: str,
    documentation: str,
    labelnames: tuple[str, ...] = (),  # noqa: N802
    registry: list[Family] | None = None,
) -> Family:
    return Family("counter", name, documentation, labelnames, registry=registry)


def Gauge(
    name: str,
    documentation: str,
    labelnames: tuple[str, ...] = (),  # noqa: N802
    registry: list[Family] | None = None,
) -> Family:
    return Family("gauge", name, documentation, labelnames, registry=registry)


def Histogram(
    name: str,
    documentation: str,
    labelnames: tuple[str, ...],  # noqa: N802
    buckets: tuple[float, ...],
    registry: list[Family] | None = None,
) -> Family:
    return Family("histogram", name, documentation, labelnames, buckets, registry)


REGISTRY: list[Family] = []
_LABELS = ("api", "interface", "method", "name", "version")
# OVMS's buckets for every *_time_us histogram: floor(10 * 1.8^i), i = 0..32 (10 us to 2.2 h)
_BUCKETS_US = tuple(math.floor(10 * 1.8**i) for i in range(33))

# OVMS's help texts (docs/metrics_output.out)
REQUESTS_SUCCESS = Counter(
    "ovms_requests_success", "Number of successful requests to a model or a DAG.", _LABELS
)
REQUESTS_FAIL = Counter(
    "ovms_requests_fail", "Number of failed requests to a model or a DAG.", _LABELS
)
REQUEST_TIME = Histogram(
    "ovms_request_time_us",
    "Processing time of requests to a model or a DAG.",
    ("interface", "name", "version"),
    _BUCKETS_US,
)
INFERENCE_TIME = Histogram(
    "ovms_inference_time_us",
    "Inference execution time in the OpenVINO backend.",
    ("name", "version"),
    _BUCKETS_US,
)
WAIT_FOR_INFER_REQ = Histogram(
    "ovms_wait_for_infer_req_time_us",
    "Request waiting time in the scheduling queue.",
    ("name", "version"),
    _BUCKETS_US,
)
STREAMS = Gauge("ovms_streams", "Number of OpenVINO execution streams.", ("name", "version"))
INFER_REQ_QUEUE_SIZE = Gauge(
    "ovms_infer_req_queue_size", "Inference request queue size (nireq).", ("name", "version")
)
INFER_REQ_ACTIVE = Gauge(
    "ovms_infer_req_active",
    "Number of currently consumed inference request from the processing queue.",
    ("name", "version"),
)
CURRENT_REQUESTS = Gauge(
    "ovms_current_requests",
    "Number of inference requests currently in process.",
    ("name", "version"),
)
BATCH_SIZE = Histogram(
    "ov_serverless_batch_size",
    "Rows per inference of a dynamically batched model",
    ("name", "version"),
    (1, 2, 4, 8, 16, 32, 64, 128),
)
AUTO_RELOADS = Counter(
    "ov_serverless_auto_reloads",
    "Reloads of a batch_size/shape auto version for a request of another shape",
    ("name", "version"),
)
VARIANT_REQUESTS = Counter(
    "ov_serverless_variant_requests",
    "Inferences per compiled variant of a version (latency / throughput "
    "when it adapts to the requests in flight, fixed otherwise)",
    ("name", "version", "variant"),
)
COLD_START = Gauge(
    "ov_serverless_cold_start_seconds",
    "Cold-start stage durations (manager: config_apply_s; per version: read_s, compile_s)",
    ("stage", "name", "version"),
)


# OVMS's MediaPipe-graph families (api="V3"): its embeddings and rerank run as graphs
_GRAPH_LABELS = ("api", "interface", "method", "name")
GRAPH_ACCEPTED = Counter(
    "ovms_requests_accepted",
    "Number of accepted requests which ended up inserting packet(s) into a MediaPipe graph",
    _GRAPH_LABELS,
)
GRAPH_REJECTED = Counter(
    "ovms_requests_rejected",
    "Number of rejected requests which failed at MediaPipe packet creation step",
    _GRAPH_LABELS,
)
GRAPH_RESPONSES = Counter(
    "ovms_responses", "Number of responses generated by the MediaPipe graph", _GRAPH_LABELS
)
GRAPH_ERROR = Counter(
    "ovms_graph_error", "Number of errors in MediaPipe graph execution", _GRAPH_LABELS
)
CURRENT_GRAPHS = Gauge("ovms_current_graphs", "Number of MediaPipe graphs in process", ("name",))


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
        labels = record.labels
        if isinstance(exc, ModelNotFoundError):  # never a label per made-up name
            labels = (*labels[:3], "")
        REQUESTS_FAIL.labels(*labels, _v(record.version)).inc()
        raise
    else:
        REQUESTS_SUCCESS.labels(*record.labels, _v(record.version)).inc()
        if method in ("Predict", "ModelInfer"):
            REQUEST_TIME.labels(interface, name, _v(record.version)).observe(
                (time.perf_counter() - started) * 1e6
            )


Snapshot = dict[tuple[str, tuple[str, ...]], tuple[list[int], float]]


def snapshot() -> Snapshot:
    """Every sample's state now: a histogram's bucket counts and sum, a value's value."""
    saved: Snapshot = {}
    for family in REGISTRY:
        for values, child in list(family._children.items()):
            if isinstance(child, Buckets):
                with child._lock:
                    saved[family.name, values] = (list(child.counts), child.sum)
            else:
                saved[family.name, values] = ([], child.value)
    return saved


def restore(saved: Snapshot) -> None:
    """Put every sample back as `saved` has it; a sample made since goes back to zero."""
    for family in REGISTRY:
        for values, child in list(family._children.items()):
            if isinstance(child, Buckets):
                counts, total = saved.get((family.name, values), ([0] * len(child.counts), 0.0))
                with child._lock:
                    child.counts, child.sum = list(counts), total
            else:
                child.value = saved.get((family.name, values), ([], 0.0))[1]


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


def render(families: Iterable[Family]) -> bytes:
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {_escape_help(family.documentation)}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for name, labels, value in family.samples():
            text = ",".join(
                f'{k}="{_escape_label(v)}"'
                for k, v in labels.items()
                if not (k == "version" and v == "")
            )
            lines.append(
                f"{name}{{{text}}} {_number(value)}" if text else f"{name} {_number(value)}"
            )
    return ("\n".join(lines) + "\n").encode()


def _bound(value: float) -> str:
    """A bucket bound as OVMS writes `le`: "10", "1274823", "+Inf"."""
    return str(int(value)) if math.isfinite(value) and value.is_integer() else _number(value)


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
