"""The InferRequests a compiled version serves from: a pool per compiled variant (the
throughput variant of an adaptive version compiled in the background, core.runtime.adaptive),
the batcher (dynamic batching, or a gathered version's requests once its rows were checked
independent), and one inference on a borrowed request with its metrics and errors."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
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
from core.runtime.ov_core import ov_core, shares_inputs
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
        if self.gathered:
            self._gather_later(model, aliases)
        elif self._adapts:
            self._second_later(model, aliases)

    def _fill_pool(self) -> None:
        """The first variant's InferRequests (every request's, unless the version adapts)."""
        assert self._compiled is not None
        self._share = shares_inputs(self._compiled)
        size = adaptive.GATHER_REQUESTS if self.gathered else 1
        self._pool = self._make_pool(self._compiled, size if self._adapts else None)
        kind = adaptive.LATENCY if self._adapts else adaptive.FIXED
        self._first = Variant(kind, self._compiled, self._pool, self._served(kind), self._blob)
        labels = (self.name, str(self.version))
        self._wait_metric = metrics.WAIT_FOR_INFER_REQ.labels(*labels)
        self._active_metric = metrics.INFER_REQ_ACTIVE.labels(*labels)
        metrics.INFER_REQ_QUEUE_SIZE.labels(*labels).set(self._pool.qsize())
        metrics.STREAMS.labels(*labels).set(streams(self._compiled))

    def _make_pool(
        self, compiled: ov.CompiledModel, fixed: int | None = None
    ) -> queue.Queue[ov.InferRequest]:
        """nireq InferRequests; by default OpenVINO's optimal number, and on a concurrent host
        at least two per stream, so a stream has the next request queued when one ends. The
        latency variant of an adaptive version takes a `fixed` number: 1 when it only runs a
        request alone in flight (each InferRequest holds its own activation buffers),
        adaptive.GATHER_REQUESTS when it runs gathered requests too."""
        size = self.config.nireq or int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
        if fixed is not None:
            size = fixed
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
        first = self.first_variant()
        self._batcher = self._new_batcher(config, lambda callers: first.served.inc(callers))

    def _new_batcher(
        self,
        config: BatchingConfig,
        on_run: Callable[[int], None],
        workers: int = 0,
        linger: float = 0.0,
    ) -> Batcher:
        """A batcher on the first variant's pool; `on_run` counts the callers of each run."""
        rows = metrics.BATCH_SIZE.labels(self.name, str(self.version))
        return Batcher(
            config,
            self._pool,
            self._infer_on,
            self.name,
            lambda seconds: self._wait_metric.observe(seconds * 1e6),
            rows.observe,
            on_run,
            workers,
            linger,
        )

    def _gather_later(self, model: ov.Model | None, aliases: Aliases) -> None:
        """Check once, in the background slot of a second compile (after the first answer),
        that a gathered version's rows do not interact; then gather requests, or, if they
        do, compile the throughput variant as for a model that cannot be gathered."""
        adaptive.compile_later(
            self._export_gate,
            lambda: self._gather_or_second(model, aliases),
            f"gather-{self.name}-{self.version}",
        )

    def _gather_or_second(self, model: ov.Model | None, aliases: Aliases) -> None:
        why = self._rows_interact()
        if why is None:  # retired before the check
            return
        if not why:
            self._start_gathering()
            return
        log.warning(
            "Version %d of model %s: rows of one inference interact (%s); requests are not "
            "gathered, a throughput variant serves requests among others",
            self.version,
            self.name,
            why,
        )
        self._compile_second(adaptive.ungather(model) if model is not None else None, aliases)

    def _rows_interact(self) -> str | None:
        """Why a gathered version's rows interact, "" when they do not (checked once, on an
        InferRequest borrowed from its pool); None when it was retired before the check."""
        with self._second_lock:
            first = self._first
            if self._rows_verdict is None and first is not None and not self._retiring():
                request = first.pool.get()
                try:
                    self._rows_verdict = adaptive.interaction(request, first.compiled)
                except (RuntimeError, ValueError, TypeError) as exc:
                    self._rows_verdict = f"the check could not run: {ov_cause(exc)}"
                finally:
                    first.pool.put(request)
            return self._rows_verdict

    def _start_gathering(self) -> None:
        """Route every request through a batcher with no window on the one compile's pool:
        alone it runs at once as a batch of 1, counted "latency"; arrived while an inference
        runs, it runs next with the others, counted "batched". Then write the gathered blob."""
        first = self._first
        if first is None:
            return
        gathered = Variant(
            adaptive.BATCHED, first.compiled, first.pool, self._served(adaptive.BATCHED), first.blob
        )

        def count(callers: int) -> None:
            (first.served if callers == 1 else gathered.served).inc(callers)

        config = BatchingConfig(adaptive.GATHER, 0)
        batcher = self._new_batcher(config, count, adaptive.GATHER_REQUESTS, adaptive.GATHER_LINGER)
        with self._idle:
            serving = self._first is first and not self._retiring()
            if serving:
                self._second, self._batcher = gathered, batcher
        if not serving:  # retired meanwhile
            batcher.close()
            return
        if self.blob_key:
            self.blobs.save_later(
                first.compiled, self.blob_key, self.blob_stamp, None, self._retiring
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

    def export_blob(self, folder: Path) -> Path | None:
        """As CompiledVersion.export_blob; a gathered version's only once its rows are checked
        independent (checked now if need be): a blob that imports gathered must serve so."""
        if self.gathered and self._rows_interact() != "":
            return None
        return super().export_blob(folder)

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
        """The compiled variants serving now: ("fixed",), ("latency",), ("latency",
        "throughput"), or, for a gathered version (one compile) once its rows were checked
        independent, ("latency", "batched")."""
        return tuple(v.kind for v in (self._first, self._second) if v is not None)

    def _infer_on(
        self, request: ov.InferRequest, feed: dict[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        self._active_metric.inc()
        try:
            results = request.infer(feed, share_inputs=self._share, share_outputs=False)
        except RuntimeError as exc:
            raise inference_error(self.name, self.version, exc) from None
        finally:
            self._active_metric.dec()
        return read_outputs(request, results, self._output_names, self.outputs)
