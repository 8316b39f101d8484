"""The REST front of `serve`, hand-written (handlers.http_server) against granian
(bench.granian_front), in one run: the same App over the same models, the two servers started
in turn for each round, so a slow spell of the shared machine touches both alike.

Rows: p50 of one client for a small request (GET /v2/health/ready), the 600 KB KServe binary
request (`classifier`, [1,3,224,224] FP32) and a TFS JSON predict (`scaler`, one row of 4),
and the req/s of 8 clients sending the TFS JSON predict.

    python -m bench.front [ROUNDS]              # prints the table, writes results/front.json
    python -m bench.front serve FRONT PORT CONFIG   # one server (FRONT: hand | granian)
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

from bench import cases
from bench.common import (
    base_env,
    free_port,
    http_ok,
    latencies,
    many_clients,
    process,
    save,
    workdir,
)

FRONTS = ("hand", "granian")
ROWS = ("small p50 ms", "KServe binary 600 KB p50 ms", "TFS JSON p50 ms", "8 clients TFS JSON rps")
TFS = b'{"instances": [[1.0, 2.0, 3.0, 4.0]]}'


def build(root: Path) -> Path:
    """classifier (224x224, batch 1) and scaler under root/repo, and their config.json."""
    from demo.models import classifier, save, scaler

    save(classifier(seed=0, batch=1), root / "repo" / "classifier" / "1")
    save(scaler(2.0), root / "repo" / "scaler" / "1")
    config = root / "repo" / "config.json"
    config.write_text(
        json.dumps(
            {
                "model_config_list": [
                    {"config": {"name": name, "base_path": str(root / "repo" / name)}}
                    for name in ("classifier", "scaler")
                ]
            }
        )
    )
    return config


def one_round(front: str, config: Path, count: int, per_client: int) -> dict[str, float]:
    port = free_port()
    cmd = [sys.executable, "-m", "bench.front", "serve", front, str(port), str(config)]
    with process(cmd, base_env(), lambda: http_ok(port, "/v2/models/classifier/ready")):
        x = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
        binary = cases.kserve_binary("classifier", x)
        small = _get(port, "/v2/health/ready")
        tfs = cases.rest(
            port, "/v1/models/scaler:predict", TFS, {"Content-Type": "application/json"}
        )
        big = cases.rest(port, binary["path"], binary["body"], binary["headers"])
        return {
            ROWS[0]: _p50(small(), count),
            ROWS[1]: _p50(big(), count // 2),
            ROWS[2]: _p50(tfs(), count),
            ROWS[3]: many_clients(tfs, 8, per_client)["rps"],
        }


def _get(port: int, path: str) -> cases.Factory:
    import http.client

    def factory() -> cases.Call:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

        def call() -> bytes:
            conn.request("GET", path)
            return conn.getresponse().read()

        return call

    return factory


def _p50(call: cases.Call, count: int) -> float:
    return statistics.median(latencies(call, count)) * 1e3


def table(rounds: list[dict[str, dict[str, float]]]) -> list[str]:
    lines = [
        "| row (median of rounds) | hand-written (min-max) | granian (min-max) | granian / hand |",
        "|---|---|---|---|",
    ]
    for row in ROWS:
        cells = []
        medians = []
        for front in FRONTS:
            values = [r[front][row] for r in rounds]
            medians.append(statistics.median(values))
            cells.append(f"{medians[-1]:.3f} ({min(values):.3f}-{max(values):.3f})")
        lines.append(f"| {row} | {cells[0]} | {cells[1]} | {medians[1] / medians[0]:.2f} |")
    return lines


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"]:
        return serve(argv[1], int(argv[2]), argv[3])
    rounds_n = int(argv[0]) if argv else 5
    config = build(workdir())
    rounds = []
    for index in range(rounds_n):
        order = FRONTS if index % 2 == 0 else FRONTS[::-1]
        rounds.append({front: one_round(front, config, 1000, 200) for front in order})
        print(f"round {index + 1}: {json.dumps(rounds[-1])}", file=sys.stderr, flush=True)
    lines = table(rounds)
    print("\n".join(lines))
    save("front", {"rounds": rounds, "table": lines})
    return 0


def serve(front: str, port: int, config: str) -> int:
    """What handlers.server does for REST, with the front chosen by name."""
    from bench import granian_front
    from core.api import App
    from core.config import Settings
    from core.serving.registry import ModelManager
    from handlers import http_server

    module: Any = http_server if front == "hand" else granian_front
    settings = Settings.from_env(config_path=config, concurrent=True)
    app = App(ModelManager.start(settings), settings)
    server = module.Server(
        app.handle,
        module.listen("127.0.0.1", port),
        threads=4,
        read_timeout=30.0,
        max_body=settings.max_request_bytes,
        refuse=app.refuse,
    )
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
