"""The 8-client crowd, paired (issue 37): `python -m bench.crowd_ab [--blocks 8]` (~2 min).

bench.adaptive measures each server's 8-client req/s once, minutes apart, so a slow spell of
the shared host moves one figure and not the other. Here the fixed THROUGHPUT server and the
adaptive one (bench.adaptive's configs and ResNet-50-sized FP16 IR) run side by side, and each
block runs, in an order that alternates: 8 clients of KServe binary REST against each server,
and 8-job AsyncInferQueues of a raw LATENCY and a raw THROUGHPUT compile in this process.
Prints each block's req/s and the median and spread of adaptive / fixed and adaptive / the
faster raw queue of its block. Results: bench/results/crowd_ab.json.

`--before TREE` (a checkout of an earlier commit, e.g. `git worktree add /tmp/before HEAD~1`)
adds that tree's adaptive server to every block, and the mixed phase of bench.adaptive (3
cycles of 3 lone requests and a burst of 8) on both adaptive servers, and prints after / before.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from bench import cases
from bench.adaptive import MODEL, adapted, build, mixed_phase, server
from bench.common import REPO, many_clients, save, workdir
from bench.warm import _queue_runner

CLIENTS = 8
BEFORE = "adaptive before"
PER_CLIENT = 6  # requests per client and block: ~1 s per server block here


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--before", type=Path, help="an earlier checkout's adaptive server too")
    args = parser.parse_args(argv)
    root = workdir()
    model_file, configs = build(root)
    x = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
    runs = raw_runs(model_file, x)
    doc: dict[str, Any] = {"load_start": os.getloadavg()}
    servers = {"fixed": (configs["fixed"], REPO), "adaptive": (configs["adaptive"], REPO)}
    if args.before:
        servers[BEFORE] = (configs["adaptive"], args.before.resolve())
    with ExitStack() as stack:
        for label, (config, tree) in servers.items():
            log, cache = root / f"{label}.log", root / f"cache-{label}"
            port, _ = stack.enter_context(server(config, log, cache, tree))
            runs[label] = served_run(port, x, label != "fixed")
            if args.before and label != "fixed":
                runs.update(mixed_runs(port, x, label))
        doc["blocks"] = blocks(runs, args.blocks)
    doc["load_end"] = os.getloadavg()
    doc["ratios"] = ratios(doc["blocks"])
    save("crowd_ab", doc)
    report(doc)
    return 0


def raw_runs(model_file: Path, x: np.ndarray) -> dict[str, Callable[[], float]]:
    core = ov.Core()
    runs = {}
    for hint in ("LATENCY", "THROUGHPUT"):
        compiled = core.compile_model(str(model_file), "CPU", {"PERFORMANCE_HINT": hint})
        run = _queue_runner(compiled, x, CLIENTS * PER_CLIENT, CLIENTS)
        runs[f"raw {hint}"] = lambda run=run: float(run()["rps"])
    return runs


def served_run(port: int, x: np.ndarray, adaptive: bool) -> Callable[[], float]:
    """8 clients against the server on `port`, once it is warm (and adapted)."""
    payload = cases.Payload(MODEL, x, b"")
    factory = cases.rest_cases(port, payload, (cases.REST_KSERVE_BINARY,))[cases.REST_KSERVE_BINARY]
    factory()()
    deadline = time.monotonic() + 60
    while adaptive and not adapted(port) and time.monotonic() < deadline:
        time.sleep(0.2)  # the adaptation starts after the first answer
    many_clients(factory, CLIENTS, 2)  # warm: every connection and batch size seen once
    return lambda: float(many_clients(factory, CLIENTS, PER_CLIENT)["rps"])


def mixed_runs(port: int, x: np.ndarray, label: str) -> dict[str, Callable[[], float]]:
    """bench.adaptive's mixed phase, 3 cycles, as two cases of a block: the lone p50 and the
    burst req/s (the first of the two to run in a block runs the phase)."""
    payload = cases.Payload(MODEL, x, b"")
    factory = cases.rest_cases(port, payload, (cases.REST_KSERVE_BINARY,))[cases.REST_KSERVE_BINARY]
    measured: dict[str, float] = {}

    def case(key: str) -> Callable[[], float]:
        def run() -> float:
            if not measured:
                phase = mixed_phase(factory, port, 3)
                measured.update(lone=phase["lone"]["p50_ms"], burst=phase["burst_rps"])
            return float(measured.pop(key))

        return run

    return {f"lone ms {label}": case("lone"), f"burst {label}": case("burst")}


def blocks(runs: dict[str, Callable[[], float]], count: int) -> list[dict[str, float]]:
    """Each block runs every case once; odd blocks in reverse order."""
    names = list(runs)
    out = []
    for index in range(count):
        order = names if index % 2 == 0 else names[::-1]
        out.append({name: runs[name]() for name in order})
    return out


def ratios(rows: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    pairs = {
        "adaptive / fixed": [r["adaptive"] / r["fixed"] for r in rows],
        "adaptive / faster raw": [
            r["adaptive"] / max(r["raw LATENCY"], r["raw THROUGHPUT"]) for r in rows
        ],
        "fixed / faster raw": [
            r["fixed"] / max(r["raw LATENCY"], r["raw THROUGHPUT"]) for r in rows
        ],
    }
    if BEFORE in rows[0]:
        for case in ("", "lone ms ", "burst "):
            after, before = f"{case}adaptive", f"{case}{BEFORE}"
            pairs[f"{after} / {before}"] = [r[after] / r[before] for r in rows]
    return {
        name: {"median": statistics.median(v), "min": min(v), "max": max(v)}
        for name, v in pairs.items()
    }


def report(doc: dict[str, Any]) -> None:
    print(f"load average at start {doc['load_start']}, end {doc['load_end']}")
    names = list(doc["blocks"][0])
    print("block | " + " | ".join(f"{n:>14}" for n in names))
    for index, row in enumerate(doc["blocks"]):
        print(f"{index:>5} | " + " | ".join(f"{row[n]:>14.1f}" for n in names))
    for name, r in doc["ratios"].items():
        print(f"{name}: median {r['median']:.3f} (min {r['min']:.3f}, max {r['max']:.3f})")


if __name__ == "__main__":
    raise SystemExit(main())
