"""Adaptive execution on concurrent hosts: one request at LATENCY speed, a crowd at THROUGHPUT.

On a host that serves many requests at once (`serve`, Cloud Run) a model version that the
config leaves untuned (no PERFORMANCE_HINT or NUM_STREAMS, nor a legacy key OVMS renames to
them) is compiled twice on the CPU: first with the LATENCY hint (one stream using every core),
which serves as soon as it is ready, then, in the background once the first request has been
answered, with the THROUGHPUT hint (one stream per core). Each request picks its variant when
it starts: alone in flight, the latency variant; with others in flight, the throughput one (once
compiled). Both compile from the same ov.Model, or, when the first came from a compiled blob,
both import that blob (one mapping; on the CPU the hint's streams apply at import); each has
its own InferRequest pool. An explicit hint or stream count keeps its OVMS meaning: one compile, no
adaptation. One-request-per-instance hosts (Lambda) keep LATENCY only; stateful models and
dynamically batched models keep one variant (a sequence lives on one InferRequest; the batcher
already gathers concurrent requests into one inference).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import openvino as ov

from core.runtime import background

LATENCY = "latency"
THROUGHPUT = "throughput"
FIXED = "fixed"  # a version compiled once: what its config (or the host default) says
TUNING_KEYS = frozenset({"PERFORMANCE_HINT", "NUM_STREAMS"})
SECOND_WAIT_S = 10.0  # an idle server compiles its throughput variant this long after the load


@dataclass(slots=True)
class Variant:
    """One compiled form of a version with the InferRequests requests borrow from it."""

    kind: str  # LATENCY | THROUGHPUT | FIXED
    compiled: ov.CompiledModel
    pool: queue.Queue[ov.InferRequest]
    served: Any  # the metrics sample counting the requests it served
    blob: Any = None  # an imported blob's memory map (shared by both variants), backing weights


def applies(concurrent: bool, device: str, explicit: Iterable[str], single: bool) -> bool:
    """Does a version adapt? A concurrent host, the CPU, no tuning key in its config, and a
    model that can run on two compiled forms (`single`: stateful or dynamically batched)."""
    return (
        concurrent
        and device.split(":")[0] == "CPU"
        and not single
        and not TUNING_KEYS.intersection(explicit)
    )


def hinted(properties: dict[str, Any], kind: str) -> dict[str, Any]:
    """The compile properties of a variant: the version's with the variant's hint."""
    return {**properties, "PERFORMANCE_HINT": kind.upper()}


def pick(inflight: int, first: Variant, second: Variant | None) -> Variant:
    """A request alone in flight runs on the first variant; one among others on the second,
    once it is compiled (`inflight` counts the request itself)."""
    if second is not None and inflight > 1:
        return second
    return first


def compile_later(gate: threading.Event, compile_second: Callable[[], None], name: str) -> None:
    """Run `compile_second` on a background thread once `gate` is set (the version's first
    answer), at most SECOND_WAIT_S after now. The interpreter's exit waits for a compile that
    has started and skips one that has not (core.runtime.background)."""

    def run() -> None:
        if background.wait(gate, SECOND_WAIT_S):
            compile_second()

    background.start(run, name)
