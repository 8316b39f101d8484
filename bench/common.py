"""Shared bench helpers: a served model repository, a server subprocess, timing stats."""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

RESULTS = Path(__file__).parent / "results"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def server(config: Path, *extra: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """`ov-serverless serve` on a free port; yields the base URL."""
    port = free_port()
    cmd = [sys.executable, "-m", "handlers.cli", "serve", "--config_path", str(config),
           "--rest_port", str(port), "--log_level", "WARNING", *extra]
    proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base + "/v2/health/ready", proc)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.1)
    raise TimeoutError(url)


def latencies(call: Callable[[], object], count: int, warmup: int = 10) -> list[float]:
    for _ in range(warmup):
        call()
    times = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return times


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"p50_ms": 1e3 * statistics.median(ordered), "p90_ms": 1e3 * pick(0.9),
            "p99_ms": 1e3 * pick(0.99)}


def workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="ovs-bench-"))


def save(name: str, doc: object) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(doc, indent=2))
    return path
