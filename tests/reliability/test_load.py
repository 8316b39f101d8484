"""The CI variant of `python -m tests.reliability.load`: ~8 s, 8 clients, against a real serve:
no 5xx, no unexpected status, no RSS growth trend, and a request count in line with what one
client does on this machine (measured first)."""

from __future__ import annotations

import time
from pathlib import Path

import requests

from tests.core.helpers import RunningServer
from tests.reliability import load

SECONDS = 8


def _one_client_rate(url: str, seconds: float = 1.0) -> float:
    """Requests per second of one client sending the load's mix, back to back."""
    with requests.Session() as session:
        done, started = 0, time.monotonic()
        while time.monotonic() - started < seconds:
            method, path, body, headers, _ = load.REQUESTS[done % len(load.REQUESTS)]
            session.request(method, url + path, data=body, headers=headers, timeout=30)
            done += 1
        return done / (time.monotonic() - started)


def test_short_load(rel_repo: Path, tmp_path: Path) -> None:
    server = RunningServer(rel_repo / "config.json", tmp_path, ("--log_level", "WARNING"))
    try:
        rate = _one_client_rate(server.url)
        summary = load.run(server.url, server.process.pid, SECONDS, 8)
    finally:
        server.stop()
    assert load.ok(summary), summary
    # 8 clients do at least a quarter of what one did alone (a wide margin for a busy host)
    assert summary["requests"] > max(8, rate * SECONDS / 4), (summary, rate)
    assert server.process.returncode == 0
