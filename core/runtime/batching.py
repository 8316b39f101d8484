"""Server-side dynamic batching: requests that arrive within a short window run as one batch.

Opt-in per model (`"dynamic_batching": {"max_batch_size": 8, "window_us": 2000}` in
config.json, OVS_DYNAMIC_BATCHING or --dynamic_batching for a single model), for models whose
inputs and outputs all have a dynamic dim 0. One collector thread waits for a free
InferRequest, takes the oldest waiting request, and adds every request that arrives within
the window and has the same shape (but for dim 0) and dtypes, up to max_batch_size rows; the
batch then runs on a worker thread, and each caller gets its own rows back. While every
InferRequest is busy, requests queue up, so batches grow with load and stay at one request
when the host is idle (the window is then the whole cost: keep it well under an inference).

With no window, a request that finds no other waiting and an InferRequest free runs at once
on its caller's thread. Adaptive execution uses the batcher so, with GATHER rows, for a version
compiled gathered (core.runtime.adaptive): a request alone runs at once as a batch of 1, and
requests that arrive while an inference runs wait for it and run next, together. With a
`linger` (a fraction of the last inference's time), a crowd keeps its batches full: for that
long after an inference of several callers ends, a request queues instead of running at once,
and the next batch waits for the callers just answered to send again (up to max_batch_size
rows), so that a batch of one and a change of batch size (which OpenVINO's CPU plugin pays for
with new kernels' parameters) do not cut into the crowd. A caller alone never waits.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.config import BatchingConfig
from core.errors import PreconditionError

Feed = dict[str, np.ndarray]
Outputs = dict[str, np.ndarray]
Run = Callable[[Any, Feed], Outputs]  # (InferRequest, feed) -> outputs


@dataclass
class _Item:
    feed: Feed
    rows: int
    key: tuple[object, ...]
    queued: float = field(default_factory=time.perf_counter)
    done: futures.Future[Outputs] = field(default_factory=futures.Future)


@dataclass(frozen=True, slots=True)
class _Last:
    """The last inference to end: when it started and ended, and for how many callers."""

    started: float = 0.0
    ended: float = 0.0
    callers: int = 0

    def lingers(self, fraction: float) -> float:
        """When a crowd stops waiting for the callers it just answered."""
        return self.ended + fraction * (self.ended - self.started)


def batch_key(feed: Feed) -> tuple[object, ...]:
    """Requests with equal keys can be concatenated along dim 0 (string tensors of any element
    width: numpy widens the bytes dtype as it concatenates)."""
    return tuple(
        (name, array.shape[1:], _kind(array.dtype)) for name, array in sorted(feed.items())
    )


def _kind(dtype: np.dtype) -> str:
    return "S" if dtype.kind == "S" else dtype.str


class Batcher:
    def __init__(
        self,
        config: BatchingConfig,
        pool: queue.Queue[Any],
        run: Run,
        name: str,
        on_wait: Callable[[float], None] = lambda seconds: None,
        on_batch: Callable[[int], None] = lambda rows: None,
        on_run: Callable[[int], None] = lambda callers: None,
        workers: int = 0,
        linger: float = 0.0,
    ) -> None:
        self.config = config
        self._pool = pool
        self._run = run
        self._on_wait = on_wait
        self._on_batch = on_batch  # rows of each inference
        self._on_run = on_run  # callers of each inference
        self._pending: queue.Queue[_Item | None] = queue.Queue()
        self._waiting = 0  # requests queued, or taken and waiting for a free InferRequest
        self._waiting_lock = threading.Lock()
        self._held: _Item | None = None  # taken but did not fit the last batch
        self._linger = linger  # of the last inference's time (see the module's docstring)
        self._last = _Last()
        self._workers = futures.ThreadPoolExecutor(  # one per InferRequest (by default those free)
            workers or pool.qsize() or 1, thread_name_prefix=f"batch-{name}"
        )
        self._thread = threading.Thread(target=self._collect, name=f"batcher-{name}", daemon=True)
        self._thread.start()

    def infer(self, feed: Feed) -> Outputs:
        rows = {len(array) for array in feed.values()}
        if len(rows) != 1 or not rows.issubset(range(1, self.config.max_batch_size + 1)):
            return self._alone(feed)
        if self.config.window_us == 0 and self._waiting == 0 and not self._crowded():
            request = self._free()
            if request is not None:  # nothing to wait for, nobody to gather: run it here
                return self._at_once(request, feed, rows.pop())
        item = _Item(feed, rows.pop(), batch_key(feed))
        self._count_waiting(1)
        self._pending.put(item)
        return item.done.result()

    def _free(self) -> Any:
        """A free InferRequest, or None."""
        try:
            return self._pool.get_nowait()
        except queue.Empty:
            return None

    def _at_once(self, request: Any, feed: Feed, rows: int) -> Outputs:
        """A request that found no other waiting and an InferRequest free (no window) runs on
        its caller's thread, saving two thread hand-offs (~0.1 ms); requests arriving
        meanwhile queue and run next, together."""
        self._on_wait(0.0)
        self._on_batch(rows)
        self._on_run(1)
        started = time.perf_counter()
        try:
            return self._run(request, feed)
        finally:
            self._last = _Last(started, time.perf_counter(), 1)
            self._pool.put(request)

    def _crowded(self) -> bool:
        """An inference of several callers ended less than its linger ago: they are likely
        to send again at once."""
        last = self._last
        return last.callers > 1 and time.perf_counter() < last.lingers(self._linger)

    @property
    def waiting(self) -> int:
        """Requests waiting for their inference to start."""
        return self._waiting

    def _count_waiting(self, change: int) -> None:
        with self._waiting_lock:
            self._waiting += change

    def close(self) -> None:
        """Stop collecting (after in-flight requests finished) and end the threads."""
        self._pending.put(None)
        self._thread.join(timeout=10)
        self._workers.shutdown(wait=True)

    def _alone(self, feed: Feed) -> Outputs:
        """Dim 0 differs between inputs or exceeds max_batch_size: run it as it came."""
        waited = time.perf_counter()
        request = self._pool.get()
        self._on_wait(time.perf_counter() - waited)
        self._on_run(1)
        try:
            return self._run(request, feed)
        finally:
            self._pool.put(request)

    def _collect(self) -> None:
        """Take the oldest waiting request, then a free InferRequest (none is held while no
        request waits), then the requests that fit with it."""
        while True:
            first = self._held or self._pending.get()
            self._held = None
            if first is None:
                return
            request = self._pool.get()
            batch = [first]
            try:
                batch = self._fill(batch)
                self._workers.submit(self._dispatch, request, batch)
            except Exception as exc:  # never leave callers waiting on a dead collector
                self._count_waiting(-len(batch))
                _fail(batch, exc)
                self._pool.put(request)

    def _fill(self, batch: list[_Item]) -> list[_Item]:
        rows = batch[0].rows
        deadline = time.perf_counter() + self.config.window_us / 1e6
        if self._crowded():
            deadline = max(deadline, self._last.lingers(self._linger))
        while rows < self.config.max_batch_size:
            try:
                item = self._pending.get(timeout=max(0.0, deadline - time.perf_counter()))
            except queue.Empty:
                break
            if item is None:  # closing: let the collector see it next
                self._pending.put(None)
                break
            if item.key != batch[0].key or rows + item.rows > self.config.max_batch_size:
                self._held = item
                break
            batch.append(item)
            rows += item.rows
        return batch

    def _dispatch(self, request: Any, batch: list[_Item]) -> None:
        self._count_waiting(-len(batch))
        started = time.perf_counter()
        for item in batch:
            self._on_wait(started - item.queued)
        rows = sum(item.rows for item in batch)
        self._on_batch(rows)
        self._on_run(len(batch))
        try:
            if len(batch) == 1:
                outputs = self._run(request, batch[0].feed)
            else:
                feed = {
                    name: np.concatenate([item.feed[name] for item in batch])
                    for name in batch[0].feed
                }
                outputs = self._run(request, feed)
            self._last = _Last(started, time.perf_counter(), len(batch))  # before they hear
            _split(batch, outputs, rows)
        except BaseException as exc:  # every caller of the batch gets the failure
            _fail(batch, exc)
        finally:
            self._pool.put(request)


def _fail(batch: list[_Item], exc: BaseException) -> None:
    for item in batch:
        if not item.done.done():
            item.done.set_exception(exc)


def _split(batch: list[_Item], outputs: Outputs, total: int) -> None:
    if len(batch) == 1:
        batch[0].done.set_result(outputs)
        return
    for name, value in outputs.items():
        if value.ndim == 0 or len(value) != total:
            raise PreconditionError(
                f"Dynamic batching: output {name} has shape {value.shape}, not {total} rows"
            )
    start = 0
    for item in batch:
        end = start + item.rows
        item.done.set_result({name: value[start:end].copy() for name, value in outputs.items()})
        start = end
