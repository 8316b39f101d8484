"""The CI variant of `python -m tests.reliability.load`: ~8 s, 8 clients, against a real serve:
no 5xx, no unexpected status, no RSS growth trend."""

from __future__ import annotations

from pathlib import Path

from tests.core.helpers import RunningServer
from tests.reliability import load


def test_short_load(rel_repo: Path, tmp_path: Path) -> None:
    server = RunningServer(rel_repo / "config.json", tmp_path, ("--log_level", "WARNING"))
    try:
        summary = load.run(server.url, server.process.pid, 8, 8)
    finally:
        server.stop()
    assert load.ok(summary), summary
    assert summary["requests"] > 200, summary
    assert server.process.returncode == 0
