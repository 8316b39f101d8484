"""One model version served: its lifecycle (load, publish, drain, retire, as OVMS reports its
states) and its requests.

A version is built once per process and reused by every request of a warm instance. Requests
borrow an InferRequest from a pool sized by `nireq`; OpenVINO releases the GIL while it runs,
so concurrent requests from a threaded server really overlap. Which InferRequest serves a call
is the one hook a subclass overrides (`_call`: a stateful model's sequences), so every model's
calls get the same timing, metrics and errors.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import openvino as ov

from core.errors import ModelNotReadyError, ServingError, relative
from core.runtime import background
from core.runtime.adaptive import Variant
from core.serving.compiled import log, ov_cause
from core.serving.pools import PooledVersion
from core.serving.ports import ov_input
from core.serving.servable import State, Status
from core.tensors.spec import Inputs, validate

RETIRE_GRACE_S = 2.0


class ModelVersion(PooledVersion):
    # batch_size / shape "auto" (core.runtime.auto_shape): who reloads this version for a
    # request that needs other shapes (set by the model's registry)
    refit: Callable[[ModelVersion, Inputs], ModelVersion] | None = None

    def load(self) -> None:
        self._set(Status(State.LOADING))
        try:
            self._build()
        except ServingError as exc:
            self._fail("UNKNOWN", exc.message)
        except (RuntimeError, OSError, ValueError, TypeError) as exc:
            self._fail("UNKNOWN", f"Cannot load model {self._files()}: {ov_cause(exc)}")
        else:
            self._set(Status(State.AVAILABLE))

    def _files(self) -> str:
        """The files a load read, for its error message: `<folder>/model.xml (+ model.bin)`."""
        path = self.model_file or self.folder
        weights = path.with_suffix(".bin")
        return f"{path} (+ {weights.name})" if path.suffix == ".xml" else str(path)

    def unpublish(self) -> bool:
        """Stop taking new requests (UNLOADING); False when it was already retiring."""
        with self._idle:
            if self.status.state >= State.UNLOADING:
                return False
            self._set(Status(State.UNLOADING))
        self._export_gate.set()
        return True

    def drain(self, grace: float = RETIRE_GRACE_S) -> None:
        """After unpublish: wait for in-flight requests, release the resources, then END.

        The grace covers requests that resolved this version just before it was unpublished
        and are still decoding their body: they run on it rather than fail."""
        background.pause(grace)  # cut short when the process exits
        with self._idle:
            self._idle.wait_for(lambda: self._inflight == 0, timeout=300)
            batcher, self._batcher = self._batcher, None
        if batcher is not None:  # joins its threads: not while holding the lock requests take
            batcher.close()
        with self._idle:
            self._idle.wait_for(lambda: self._inflight == 0, timeout=300)  # any that came since
            self._compiled = self._blob = None  # the mapping too: its file may be deleted
            self._first = self._second = None  # both variants of an adaptive version
            self._pool = queue.Queue()
            self._set(Status(State.END))

    def retire(self, grace: float = RETIRE_GRACE_S) -> None:
        """UNLOADING until in-flight requests finish, then END (idempotent)."""
        if self.unpublish():
            self.drain(grace)

    def _set(self, status: Status) -> None:
        self.status = status
        log.info(
            "STATUS CHANGE: Version %d of model %s status change. New status: "
            '( "state": "%s", "error_code": "%s" )',
            self.version,
            self.name,
            status.state.name,
            status.error_code,
        )

    def _fail(self, code: str, message: str) -> None:
        self.status = Status(State.LOADING, code, self._relative(message))
        log.error("Version %d of model %s failed to load: %s", self.version, self.name, message)

    def _relative(self, text: str) -> str:
        """`text` with this version's folder written relative to the model's base path (its
        number): a client never sees the server's absolute paths (the log does)."""
        if self.folder == Path():  # no files were fetched: nothing of the server's to hide
            return text
        return relative(text, self.folder, str(self.version))

    @property
    def color_format(self) -> str:
        """The channel order jpeg/png inputs are decoded to (BGR or RGB)."""
        return self.config.color_format

    def infer(self, inputs: Inputs) -> dict[str, np.ndarray]:
        """Validate and run one request; outputs are owned by the caller."""
        if self.refit is not None:  # batch_size / shape "auto"
            fitted = self.refit(self, inputs)
            if fitted is not self:
                return fitted.infer(inputs)
        call = self._call(inputs)
        ready = validate(self.model_inputs, call.inputs)
        feed = {self._input_ports[name]: ov_input(array) for name, array in ready.items()}
        with self.serving():
            outputs = self._run(feed, call)
        return call.answer(outputs)

    def _call(self, inputs: Inputs) -> Call:
        """The hook a stateful model overrides: how one call gets the InferRequest it runs
        on. Here: any request of the pool of the variant the requests in flight call for."""
        return Call(self, inputs)

    @contextmanager
    def serving(self) -> Iterator[None]:
        """Count one request in flight; a retiring version still serves requests it got."""
        with self._idle:
            if self._compiled is None or self.status.state not in (
                State.AVAILABLE,
                State.UNLOADING,
            ):
                raise ModelNotReadyError(
                    f"Model with requested version is not loaded yet - name: {self.name}; "
                    f"version: {self.version}"
                )
            self._inflight += 1
        try:
            yield
        finally:
            with self._idle:
                self._inflight -= 1
                self._idle.notify_all()
            if not self._export_gate.is_set():
                self._export_gate.set()

    def _run(self, feed: dict[str, np.ndarray], call: Call | None = None) -> dict[str, np.ndarray]:
        """Run `feed` on the InferRequest `call` takes (by default one of the pool), timing
        the wait for it and counting the request on its variant, whatever the model."""
        if self._batcher is not None:  # it counts each request on its variant
            return self._batcher.infer(feed)
        call = call or Call(self, {})
        waited = time.perf_counter()
        variant, request = call.take()
        try:
            self._wait_metric.observe((time.perf_counter() - waited) * 1e6)
            variant.served.inc()
            return self._infer_on(request, feed)
        finally:
            call.give_back(variant, request)


class Call:
    """One infer call as a version serves it: the model inputs it carries, the InferRequest it
    runs on (`take`, then `give_back`), and what it answers (`answer`). A stateful model's
    calls (core.serving.stateful) choose their sequence's request and handle its state here;
    the timing, metrics and errors around the inference stay ModelVersion's, the same for all."""

    def __init__(self, version: ModelVersion, inputs: Inputs) -> None:
        self.version = version
        self.inputs = inputs

    def take(self) -> tuple[Variant, ov.InferRequest]:
        """Any InferRequest of the pool of the variant the requests in flight call for (it
        waits for one to be free)."""
        variant = self.version.pick_variant()
        return variant, variant.pool.get()

    def give_back(self, variant: Variant, request: ov.InferRequest) -> None:
        """After the inference, whatever its outcome."""
        variant.pool.put(request)

    def answer(self, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return outputs
