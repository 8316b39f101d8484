"""core.runtime.background at interpreter exit: a task still waiting for its moment is skipped,
one at work is waited for, and the wait is bounded (a task that hangs cannot hold the exit)."""

from __future__ import annotations

import subprocess
import sys
import time

SCRIPT = """
import sys
import threading
import time

from core.runtime import background

background.EXIT_WAIT_S = float(sys.argv[1])
never = threading.Event()


def waiting() -> None:
    if background.wait(never, 60):
        print("the waiting task ran", flush=True)


def working() -> None:
    time.sleep(float(sys.argv[2]))
    print("the working task finished", flush=True)


background.start(waiting, "waiting")
background.start(working, "working")
time.sleep(0.2)  # both started: one waits for its gate, one works
"""


def exit_with(bound: float, work: float) -> tuple[str, float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(bound), str(work)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout, time.monotonic() - started


def test_the_exit_skips_a_waiting_task_and_waits_for_a_working_one() -> None:
    out, _ = exit_with(bound=60, work=1.0)
    assert out == "the working task finished\n"


def test_the_exit_wait_is_bounded() -> None:
    out, took = exit_with(bound=0.5, work=60)
    assert out == ""
    assert took < 45  # the task would have held the exit 60 s
