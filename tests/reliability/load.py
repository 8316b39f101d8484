"""Load test against a real `ov-serverless serve` on 127.0.0.1.

    python -m tests.reliability.load --seconds 30 --clients 8

Builds a small repository in a temp dir (or uses --config_path), starts `serve`, runs
`--clients` threads sending a mix of TFS and KServe predicts (JSON and binary) plus a few bad
requests (expected 4xx), samples the worker's RSS every second, and prints one JSON summary.
Exit 1 on any 5xx / transport error or an RSS growth trend (last-third mean >
first-third mean * 1.1 + 16 MiB).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import requests

from tests.core.helpers import RunningServer, kserve_binary_request
from tests.reliability.helpers import build_repository, rss_bytes

SLACK_BYTES = 16 << 20
X = [[1.0, 2.0, 3.0, 4.0]]
BINARY = kserve_binary_request(
    {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32"}]},
    np.ones(4, np.float32).tobytes(),
)
REQUESTS: list[tuple[str, str, bytes, dict[str, str], int]] = [
    ("POST", "/v1/models/scaler:predict", json.dumps({"instances": X * 8}).encode(), {}, 200),
    (
        "POST",
        "/v2/models/scaler/infer",
        json.dumps(
            {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": X[0]}]}
        ).encode(),
        {},
        200,
    ),
    ("POST", "/v2/models/scaler/infer", *BINARY, 200),
    ("GET", "/v2/models/scaler/ready", b"", {}, 200),
    ("POST", "/v1/models/scaler:predict", b"not json", {}, 412),
    ("POST", "/v1/models/nope:predict", b'{"instances": [[1]]}', {}, 404),
]


def run(base_url: str, pid: int, seconds: float, clients: int) -> dict[str, Any]:
    stop = threading.Event()
    statuses: Counter[int] = Counter()
    unexpected: Counter[str] = Counter()
    lock = threading.Lock()

    def client(index: int) -> None:
        session = requests.Session()
        i = index
        local: Counter[int] = Counter()
        while not stop.is_set():
            method, path, body, headers, want = REQUESTS[i % len(REQUESTS)]
            i += 1
            try:
                response = session.request(
                    method, base_url + path, data=body, headers=headers, timeout=30
                )
            except requests.RequestException as exc:
                with lock:
                    unexpected[type(exc).__name__] += 1
                continue
            local[response.status_code] += 1
            if response.status_code != want:
                with lock:
                    unexpected[f"{path} {response.status_code}"] += 1
        with lock:
            statuses.update(local)
        session.close()

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(clients)]
    rss = [rss_bytes(pid)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    while time.monotonic() - started < seconds:
        time.sleep(1.0)
        rss.append(rss_bytes(pid))
    stop.set()
    for thread in threads:
        thread.join(timeout=35)
    elapsed = time.monotonic() - started
    third = max(len(rss) // 3, 1)
    first, last = float(np.mean(rss[:third])), float(np.mean(rss[-third:]))
    total = sum(statuses.values())
    return {
        "seconds": round(elapsed, 1),
        "clients": clients,
        "requests": total,
        "requests_per_s": round(total / elapsed, 1),
        "status_counts": {str(k): v for k, v in sorted(statuses.items())},
        "errors_5xx": sum(v for k, v in statuses.items() if k >= 500),
        "unexpected": dict(unexpected),
        "rss_start_mib": round(rss[0] / 2**20, 1),
        "rss_end_mib": round(rss[-1] / 2**20, 1),
        "rss_first_third_mib": round(first / 2**20, 1),
        "rss_last_third_mib": round(last / 2**20, 1),
        "rss_stable": last <= first * 1.1 + SLACK_BYTES,
    }


def ok(summary: dict[str, Any]) -> bool:
    return bool(
        summary["errors_5xx"] == 0
        and not summary["unexpected"]
        and summary["rss_stable"]
        and summary["requests"] > 0
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.load")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--config_path", help="default: a fresh scaler repository")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        config = (
            Path(args.config_path)
            if args.config_path
            else build_repository(Path(tmp) / "repo") / "config.json"
        )
        server = RunningServer(config, Path(tmp), ("--log_level", "WARNING"))
        try:
            summary = run(server.url, server.process.pid, args.seconds, args.clients)
        finally:
            server.stop()
        summary["server_exit_code"] = server.process.returncode
    print(json.dumps(summary, indent=1))
    return 0 if ok(summary) and summary["server_exit_code"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
