"""Background work the interpreter's exit waits for, within a bound.

A compile or a blob export cut off at exit does harm: OpenVINO aborts the process ("terminate
called without an active exception") when a compile still runs in a thread, and an export would
leave its temporary file behind. A task started here runs on a daemon thread (it never keeps a
server alive by itself); at exit, tasks still waiting for their moment are skipped and the ones
already working are joined, for EXIT_WAIT_S at most in all.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Callable

EXIT_WAIT_S = 60.0
POLL_S = 0.05

_running: set[threading.Thread] = set()
_lock = threading.Lock()
_exiting = threading.Event()


def start(task: Callable[[], None], name: str) -> threading.Thread:
    """Run `task` on a daemon thread that the interpreter's exit waits for."""

    def run() -> None:
        try:
            task()
        finally:
            with _lock:
                _running.discard(threading.current_thread())

    thread = threading.Thread(target=run, name=name, daemon=True)
    with _lock:
        _running.add(thread)
    thread.start()
    return thread


def wait(gate: threading.Event | None, timeout: float) -> bool:
    """Wait until `gate` is set, at most `timeout` seconds; False when the process is exiting
    (the task should then give up before it starts its work)."""
    deadline = time.monotonic() + timeout
    while gate is not None and not gate.wait(POLL_S) and time.monotonic() < deadline:
        if _exiting.is_set():
            return False
    return not _exiting.is_set()


def pause(seconds: float) -> bool:
    """Sleep `seconds`, less when the process starts exiting; False then."""
    return not _exiting.wait(seconds)


def finish(limit: float | None = None) -> bool:
    """Skip the tasks still waiting, join the working ones for `limit` seconds in all (by
    default EXIT_WAIT_S); True when none is left. Runs at interpreter exit."""
    _exiting.set()
    deadline = time.monotonic() + (EXIT_WAIT_S if limit is None else limit)
    with _lock:
        threads = list(_running)
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return not any(thread.is_alive() for thread in threads)


atexit.register(finish)
