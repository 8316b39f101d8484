"""Adaptive execution on concurrent hosts: one request at LATENCY speed, a crowd at THROUGHPUT.

On a host that serves many requests at once (`serve`, Cloud Run) a model version that the
config leaves untuned (no PERFORMANCE_HINT or NUM_STREAMS, nor a legacy key OVMS renames to
them) adapts to the requests in flight, on the CPU, in one of two ways.

Gathered (one compile). When the model can be gathered (`gather`: the config sets no shape,
batch_size, layout or dynamic_batching; every input has a static dim 0 of 1 and is not a string
tensor; after dim 0 of every input is made Dimension(1, GATHER), every output's dim 0 is exactly
that), it is compiled once with the LATENCY hint (one stream using every core). It still serves
the signature the model declares (dim 0 == 1 on inputs and outputs, in metadata, validation and
errors). Its one InferRequest (GATHER_REQUESTS) serves through core.runtime.batching's batcher
with no window: a request alone runs at once as a batch of 1 (on its own thread); requests that
arrive while an inference runs queue and run next as one batch of up to GATHER rows, each caller
getting its own rows back; right after a batch of several callers, the next waits briefly for
them to send again (GATHER_LINGER), so that a crowd runs full batches. Before the first gathered
inference, once per version and in the background after the first answer (`compile_later`),
`interaction` runs two different deterministic rows alone and gathered and compares the answers:
until it passes, requests run one at a time on the compile; if it fails (rows interact, e.g. a
softmax over dim 0), the version logs why, keeps the compile for a request alone in flight and
compiles a THROUGHPUT variant of the model with its static dim 0 for requests among others, as
below. A gathered compile's blob is written under its own key (`GATHER_KEY` added to the plain
one), only once the check passed, so a new instance imports it as gathered without reading the
model; a load looks that key up first, then the plain one.

Two compiles (any other untuned model). First with the LATENCY hint, which serves as soon as it
is ready, then, in the background once the first request has been answered, with the THROUGHPUT
hint (one stream per core). Each request picks its variant when it starts: alone in flight, the
latency variant; with others in flight, the throughput one (once compiled). Both compile from
the same ov.Model, or, when the first came from a compiled blob, both import that blob (one
mapping; on the CPU the hint's streams apply at import); each has its own InferRequest pool.
OpenVINO's CPU plugin shares no weights between compiled models, so the second compile costs
about one more copy of the weights (1.25x the FP16 weights on the ResNet-50-sized bench model,
bench/RESULTS.md), which the gathered design avoids (0.23x).

The trade between them, measured on 2 cores (bench/RESULTS.md): a gathered crowd runs at
0.93x the faster raw queue on a quiet host (a THROUGHPUT compile: 0.97x), its one two-thread
inference more easily slowed by the request threads and other work on the cores than two
one-thread streams are. A host that would rather pay the second copy of the weights for that
sets OVS_GATHER=0 (`--gather false`, Host.gather): every untuned model then takes two compiles.

An explicit hint or stream count keeps its OVMS meaning: one compile, no adaptation.
One-request-per-instance hosts (Lambda) keep a static LATENCY compile only; stateful models and
dynamically batched models keep one variant (a sequence lives on one InferRequest; the batcher
already gathers concurrent requests into one inference).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import openvino as ov

from core.runtime import background

LATENCY = "latency"
THROUGHPUT = "throughput"
BATCHED = "batched"  # requests gathered with others into one inference of a gathered version
FIXED = "fixed"  # a version compiled once: what its config (or the host default) says
TUNING_KEYS = frozenset({"PERFORMANCE_HINT", "NUM_STREAMS"})
SECOND_WAIT_S = 10.0  # an idle server adapts (row check, throughput compile) after this long
# Rows per gathered inference. Measured in raw OpenVINO (bench/adaptive_memory.py, ResNet-50-
# sized FP16 IR, quiet 2-core host): with dim 0 bounded [1..4] a batch of 1 takes 1.02-1.06x
# the static compile's time (+1 ms at most right after a batch of 4), and a batch of 4 takes
# 75 ms (53 img/s against 49.8 for an 8-job THROUGHPUT queue), for 0.23x the FP16 weights of
# extra RSS; a bound of 8 costs 0.53x and was no faster.
GATHER = 4
GATHER_KEY = ("gathered", GATHER)  # added to a gathered compile's blob key
# The row check's relative tolerance by compiled precision (interaction). On the bench CPU
# (bf16 inference) the gathered rows of the test classifier and the ResNet-50-sized model were
# bit-identical to the same rows alone; other CPUs' kernels may sum in another order.
F32_RTOL = 1e-3
REDUCED_RTOL = 3e-2
# InferRequests of a gathered version. `python -m bench.gather_requests` (2026-12-07, load
# 0.0-1.2 on 2 cores, 3 alternating blocks): 8 clients got 48.9-51.6 req/s from 1 InferRequest
# (3.9 rows per inference) against 46.7-47.8 from 2 (3.0-3.2 rows: the second starts a smaller
# batch that waits behind the one stream anyway), 39.5-46.7 against 38.4-43.0 in a second run;
# a lone request's p50 was the same (20.8-21.6 against 20.3-21.3 ms; 20.1-21.5 ms calling the
# InferRequest directly, without the batcher). One also holds one set of activation buffers.
GATHER_REQUESTS = 1
# How long, as a fraction of the inference that just ended, a crowd waits for the callers it
# answered to send again before it runs a batch that is not full (core.runtime.batching). 8 HTTP
# clients of the ResNet-50-sized model sent from this host (bench/RESULTS.md, 2026-12-07
# 15:15): without it 40-60% of the inferences ran 1-2 rows, a third of them a request alone
# between two batches; with it nearly all ran 4.
GATHER_LINGER = 0.06


@dataclass(slots=True)
class Variant:
    """One compiled form of a version with the InferRequests requests borrow from it."""

    kind: str  # LATENCY | THROUGHPUT | BATCHED | FIXED
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
    once it is compiled (`inflight` counts the request itself). A gathered version's requests
    reach the batched variant through its batcher, never here."""
    if second is not None and second.kind == THROUGHPUT and inflight > 1:
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


# -- gathering ---------------------------------------------------------------------------------


def gather(model: ov.Model) -> bool:
    """Make every input's dim 0 Dimension(1, GATHER) when the model can be gathered: every
    input of rank >= 1 with a static dim 0 of 1 and not a string tensor, every output's dim 0
    a static 1 before and exactly Dimension(1, GATHER) after (an output that does not follow
    the inputs has a batch baked in, or rows that meet). False leaves the model as it was."""
    inputs = [port.get_partial_shape() for port in model.inputs]
    if not inputs or not all(
        _one_row(shape) and port.get_element_type() != ov.Type.string
        for port, shape in zip(model.inputs, inputs, strict=True)
    ):
        return False
    if not all(_one_row(port.get_partial_shape()) for port in model.outputs):
        return False
    try:
        model.reshape({index: _rows(shape) for index, shape in enumerate(inputs)})
    except RuntimeError:
        model.reshape(dict(enumerate(inputs)))
        return False
    if all(_gathered(port.get_partial_shape()) for port in model.outputs):
        return True
    model.reshape(dict(enumerate(inputs)))
    return False


def ungather(model: ov.Model) -> ov.Model:
    """A gathered model back to its static dim 0 of 1 (the two-compile scheme's)."""
    one = ov.Dimension(1)
    model.reshape({i: _first(port.get_partial_shape(), one) for i, port in enumerate(model.inputs)})
    return model


def _one_row(shape: ov.PartialShape) -> bool:
    return (
        shape.rank.is_static
        and len(shape) >= 1
        and shape[0].is_static
        and shape[0].get_length() == 1
    )


def _gathered(shape: ov.PartialShape) -> bool:
    if shape.rank.is_dynamic or len(shape) == 0 or shape[0].is_static:
        return False
    return shape[0].get_min_length() == 1 and shape[0].get_max_length() == GATHER


def _rows(shape: ov.PartialShape) -> ov.PartialShape:
    return _first(shape, ov.Dimension(1, GATHER))


def _first(shape: ov.PartialShape, dim: ov.Dimension) -> ov.PartialShape:
    return ov.PartialShape([dim, *list(shape)[1:]])


def interaction(request: ov.InferRequest, compiled: ov.CompiledModel) -> str:
    """Why the rows of a gathered inference are not what they are alone ("" when they are):
    an all-zeros row and an all-ones row (cast to each input's type) run alone, then
    alternating in batches of 2 and GATHER, and each gathered row must match its lone answer
    within the compiled precision's tolerance."""
    rows = [_row_feed(compiled, value) for value in (0, 1)]
    alone = [_answers(request, feed) for feed in rows]  # [row][output]
    rtol = _tolerance(compiled)
    names = [_name(port) for port in compiled.outputs]
    for size in (2, GATHER):
        picks = [index % 2 for index in range(size)]
        feed = {key: np.concatenate([rows[p][key] for p in picks]) for key in rows[0]}
        together = _answers(request, feed)
        for output, (name, value) in enumerate(zip(names, together, strict=True)):
            why = _differs(value, [alone[p][output] for p in picks], rtol)
            if why:
                return f"output {name} {why} in a batch of {size}"
    return ""


def _differs(gathered: np.ndarray, alone: list[np.ndarray], rtol: float) -> str:
    """How the gathered rows of one output differ from the same rows run alone ("" if not)."""
    if gathered.ndim == 0 or len(gathered) != len(alone):
        return f"has shape {gathered.shape}"
    for index, lone in enumerate(alone):
        if not _close(gathered[index : index + 1], lone, rtol):
            return f"row {index} differs from the same row run alone"
    return ""


def _row_feed(compiled: ov.CompiledModel, value: int) -> dict[int, np.ndarray]:
    """One row filled with `value` for each input (a dynamic dim at its least size, at least 1)."""
    feed = {}
    for index, port in enumerate(compiled.inputs):
        shape = port.get_partial_shape()
        dims = [1] + [
            d.get_length() if d.is_static else max(d.get_min_length(), 1) for d in list(shape)[1:]
        ]
        feed[index] = np.full(dims, value, dtype=port.get_element_type().to_dtype())
    return feed


def _answers(request: ov.InferRequest, feed: dict[int, np.ndarray]) -> list[np.ndarray]:
    """Inputs copied as the version's requests copy theirs (a gathered compile's inputs are
    dynamic: core.runtime.ov_core.shares_inputs)."""
    results = request.infer(feed, share_inputs=False, share_outputs=False)
    return [np.array(value) for value in results.to_tuple()]


def _tolerance(compiled: ov.CompiledModel) -> float:
    """Relative tolerance for the compiled precision: batches of other sizes may sum in
    another order (f32: ~1e-6 apart; bf16 / f16 keep 8 / 11 bits of mantissa)."""
    try:
        precision = compiled.get_property("INFERENCE_PRECISION_HINT")
    except RuntimeError:
        return REDUCED_RTOL
    name = precision.get_type_name() if hasattr(precision, "get_type_name") else str(precision)
    return F32_RTOL if name in ("f32", "f64") else REDUCED_RTOL


def _close(gathered: np.ndarray, alone: np.ndarray, rtol: float) -> bool:
    """Equal shapes and values within `rtol` of each other and of the lone answer's scale
    (numbers); equal (anything else)."""
    if gathered.shape != alone.shape:
        return False
    if gathered.dtype.kind not in "biuf" or alone.dtype.kind not in "biuf":
        return bool(np.array_equal(gathered, alone))
    a, b = gathered.astype(np.float64), alone.astype(np.float64)
    scale = float(np.abs(b).max()) if b.size else 0.0
    return bool(np.allclose(a, b, rtol=rtol, atol=rtol * max(scale, 1e-6), equal_nan=True))


def _name(port: ov.Output) -> str:
    return str(port.get_any_name()) if port.get_names() else port.get_node().get_friendly_name()
