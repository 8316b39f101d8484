"""The InferRequests a compiled version serves from: a pool per compiled variant (the
throughput variant of an adaptive version compiled in the background, core.runtime.adaptive),
the dynamic batcher, and one inference on a borrowed request with its metrics and errors."""

from __future__ import annotations

import queue
import time
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from core import metrics
from core.config import BatchingConfig
from core.errors import ModelNotReadyError, ServingError
from core.runtime import adaptive
from core.runtime.adaptive import Variant
from core.runtime.aliases import Aliases
from core.runtime.batching import Batcher
from core.runtime.ov_core import ov_core
from core.serving.compiled import CompiledVersion, inference_error, log, ov_cause, streams
from core.serving.ports import dynamic, read_outputs


class PooledVersion(CompiledVersion):
    """A compiled version with the InferRequests its requests borrow."""

    def _build(self) -> None:
        """Compile (or import) the version, then its InferRequests; an adaptive version's
        throughput variant follows in the background."""
        model, aliases = self._compile()
        self._fill_pool()
        if self.config.dynamic_batching is not None:
            self._start_batching(self.config.dynamic_batching)
        if self._adapts:
            self._second_later(model, aliases)

    def _fill_pool(self) -> None:
        """The first variant's InferRequests (every request's, unless the version adapts)."""
        assert self._compiled is not None
        self._pool = self._make_pool(self._compiled, lone=self._adapts)
        kind = adaptive.LATENCY if self._adapts else adaptive.FIXED
        self._first = Variant(kind, self._compiled, self._pool, self._served(kind), self._blob)
        labels = (self.name, str(self.version))
        self._wait_metric = metrics.WAIT_FOR_INFER_REQ.labels(*labels)
        self._active_metric = metrics.INFER_REQ_ACTIVE.labels(*labels)
        metrics.INFER_REQ_QUEUE_SIZE.labels(*labels).set(self._pool.qsize())
        metrics.STREAMS.labels(*labels).set(streams(self._compiled))

    def _make_pool(
        self, compiled: ov.CompiledModel, lone: bool = False
    ) -> queue.Queue[ov.InferRequest]:
        """nireq InferRequests; by default OpenVINO's optimal number, and on a concurrent host
        at least two per stream, so a stream has the next request queued when one ends. The
        latency variant of an adaptive version (`lone`) only runs a request that is alone in
        flight: one InferRequest (each holds its own activation buffers)."""
        size = self.config.nireq or int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
        if lone:
            size = 1
        elif not self.config.nireq:
            size = max(size, self.host.pool_floor(streams(compiled)))
        pool: queue.Queue[ov.InferRequest] = queue.Queue()
        for _ in range(max(size, 1)):
            pool.put(compiled.create_infer_request())
        return pool

    def _served(self, kind: str) -> Any:
        return metrics.VARIANT_REQUESTS.labels(self.name, str(self.version), kind)

    def _start_batching(self, config: BatchingConfig) -> None:
        fixed = [
            spec.name
            for spec in (*self.inputs.values(), *self.outputs.values())
            if not spec.dims or not dynamic(spec.dims[0])
        ]
        if fixed:
            raise ServingError(
                f"dynamic_batching needs a dynamic dim 0 on every input and output (set "
                f"batch_size: -1 or a shape); fixed: {', '.join(fixed)}"
            )
        rows = metrics.BATCH_SIZE.labels(self.name, str(self.version))
        self._batcher = Batcher(
            config,
            self._pool,
            self._infer_on,
            self.name,
            lambda seconds: self._wait_metric.observe(seconds * 1e6),
            rows.observe,
        )

    def _second_later(self, model: ov.Model | None, aliases: Aliases) -> None:
        """Compile the throughput variant on a background thread once the first request has
        been answered (at most adaptive.SECOND_WAIT_S after the load), so that the first answer
        does not share the CPU with it."""
        adaptive.compile_later(
            self._export_gate,
            lambda: self._compile_second(model, aliases),
            f"variant-{self.name}-{self.version}",
        )

    def _compile_second(self, model: ov.Model | None, aliases: Aliases) -> None:
        """Import or compile the throughput variant and start routing crowds to it (once)."""
        with self._second_lock:
            if self._second is not None or self._retiring():
                return
            core = ov_core()
            device, wanted = self._second_args()
            started = time.perf_counter()
            try:
                compiled, blob = self._variant_model(core, device, wanted, model, aliases)
            except (ServingError, RuntimeError, OSError, ValueError, TypeError) as exc:
                log.warning(
                    "Version %d of model %s: no throughput variant (%s); every request "
                    "runs on the latency one",
                    self.version,
                    self.name,
                    ov_cause(exc),
                )
                return
            self.timings["throughput_compile_s"] = time.perf_counter() - started
            second = Variant(
                adaptive.THROUGHPUT,
                compiled,
                self._make_pool(compiled),
                self._served(adaptive.THROUGHPUT),
                blob,
            )
            with self._idle:
                first = self._first
                if first is None or self._retiring():  # retired meanwhile: nothing to serve
                    return
                self._second = second
            labels = (self.name, str(self.version))
            metrics.INFER_REQ_QUEUE_SIZE.labels(*labels).inc(second.pool.qsize())
            metrics.STREAMS.labels(*labels).set(max(streams(compiled), streams(first.compiled)))

    def export_blobs(self, folder: Path) -> list[Path]:
        """export_blob as a list: an adaptive version's throughput variant imports the same
        blob with its own hint, so one blob serves both variants."""
        first = self.export_blob(folder)
        return [] if first is None else [first]

    def first_variant(self) -> Variant:
        """The variant every request may run on; ModelNotReadyError before the load built it
        (serving() only admits a loaded version)."""
        if self._first is None:
            raise ModelNotReadyError(
                f"Model with requested version is not loaded yet - name: {self.name}; "
                f"version: {self.version}"
            )
        return self._first

    def pick_variant(self) -> Variant:
        """The variant a new request runs on: the throughput one among others in flight, once
        compiled (core.runtime.adaptive), else the first."""
        return adaptive.pick(self._inflight, self.first_variant(), self._second)

    @property
    def variants(self) -> tuple[str, ...]:
        """The compiled variants serving now: ("fixed",), ("latency",) or ("latency",
        "throughput")."""
        return tuple(v.kind for v in (self._first, self._second) if v is not None)

    def _infer_on(
        self, request: ov.InferRequest, feed: dict[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        self._active_metric.inc()
        try:
            results = request.infer(feed, share_inputs=True, share_outputs=False)
        except RuntimeError as exc:
            raise inference_error(self.name, self.version, exc) from None
        finally:
            self._active_metric.dec()
        return read_outputs(request, results, self._output_names, self.outputs)
