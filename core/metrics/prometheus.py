"""A small Prometheus text-format library: counters, gauges and histograms with labels, a
registry, and the text format 0.0.4.

In-house instead of prometheus-client: that package's import (http.server, wsgiref, urllib for
its push gateway) weighs on every cold start, and its counters would be exposed as
`<name>_total` plus `<name>_created` where OVMS exposes `ovms_requests_success` as is. `render()`
writes counters under their bare name, and leaves the `version` label out where it is empty
(status/ready, as in OVMS's docs/metrics_output.out).
"""

from __future__ import annotations

import bisect
import functools
import math
import threading
from collections.abc import Iterable, Iterator
from typing import Any

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


# prometheus_client's names: Counter(name, doc, labelnames), Histogram(..., labelnames, buckets)
Counter = functools.partial(Family, "counter")
Gauge = functools.partial(Family, "gauge")
Histogram = functools.partial(Family, "histogram")


REGISTRY: list[Family] = []


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
