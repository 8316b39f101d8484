"""Warm and cold rows of two checkouts in the same run, alternated (A B B A ...): for a change
that must keep performance where it was (issue 33's renovation).

    python -m bench.tree_ab --before /tmp/base [--after .] [--rounds 4]

Warm: `ov-serverless serve` of each checkout (one-at-a-time host, OVS_CONCURRENT=0, so both
trees compile the same LATENCY model) on bench.run's classifier and resnet50; per round and
tree, the p50 of one client for each bench.cases case and the req/s of 8 clients on REST KServe
binary. Cold: bench/cold.py's Lambda probe (import, init, first request from local disk, an
empty cache) of each checkout on resnet50. Prints medians over rounds, their spread and the
after/before ratio, with the load average; the runs go to bench/results/tree_ab.json.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from bench import cases, cold
from bench.common import (
    REPO,
    base_env,
    free_port,
    http_ok,
    many_clients,
    one_client,
    ov_serve_cmd,
    process,
    save,
    workdir,
)
from bench.run import build_models

MODELS = ("classifier", "resnet50")
CALLS = {"classifier": 200, "resnet50": 40}
CLIENTS = 8


@contextmanager
def serving(tree: Path, config: Path, cache: Path) -> Iterator[tuple[int, int]]:
    """`serve` run from `tree` (its own modules: cwd and PYTHONPATH), until ready."""
    rest, grpc = free_port(), free_port()
    env = base_env(OVS_CACHE_DIR=str(cache), OVS_CONCURRENT="0")
    env["PYTHONPATH"] = str(tree)
    ready = lambda: http_ok(rest, "/v2/health/ready")  # noqa: E731
    with process(ov_serve_cmd(config, rest, grpc), env, ready, timeout=180, cwd=tree):
        yield rest, grpc


def warm_round(tree: Path, config: Path, cache: Path, inputs: dict[str, Any]) -> dict[str, float]:
    rows: dict[str, float] = {}
    with serving(tree, config, cache) as (rest, grpc):
        for name in MODELS:
            factories = {
                **cases.rest_cases(rest, inputs[name], cases.ALL_CASES),
                **cases.grpc_cases(grpc, inputs[name], cases.ALL_CASES),
            }
            for case, factory in factories.items():
                rows[f"{name} {case} p50 ms"] = one_client(factory(), CALLS[name])["p50_ms"]
            binary = factories[cases.REST_KSERVE_BINARY]
            many = many_clients(binary, CLIENTS, CALLS[name] // 4)
            rows[f"{name} {cases.REST_KSERVE_BINARY} {CLIENTS} clients req/s"] = many["rps"]
    return rows


def cold_round(tree: Path, request: Path, cache: Path) -> dict[str, float]:
    env = base_env(
        AWS_LAMBDA_FUNCTION_NAME="bench",
        OVS_CACHE_DIR=str(cache),
        OVS_MODEL_NAME="resnet50",
        OVS_MODEL_PATH=str(request.parent / "repo" / "resnet50"),
        OVS_LOG_LEVEL="WARNING",
    )
    env["PYTHONPATH"] = str(tree)
    got = cold.probe("lambda", request, env, tree)
    return {f"Lambda cold start {key}": got[key] for key in ("import_s", "total_s", "peak_mb")}


def run(trees: dict[str, Path], rounds: int) -> dict[str, Any]:
    root = workdir()
    files = build_models(root, MODELS)
    rng = np.random.default_rng(0)
    jpeg = cases.make_jpeg()
    inputs = {
        name: cases.Payload(name, rng.random((1, 3, 224, 224), dtype=np.float32), jpeg)
        for name in files
    }
    x = inputs["resnet50"].x
    request = cold.request_file(root, "resnet50", files["resnet50"], x)
    runs: dict[str, list[dict[str, float]]] = {label: [] for label in trees}
    order = list(trees)
    for index in range(rounds):
        for label in order if index % 2 == 0 else order[::-1]:
            cache = root / f"cache-{label}-{index}"
            row = warm_round(trees[label], root / "repo" / "config.json", cache, inputs)
            row |= cold_round(trees[label], request, root / f"cold-{label}-{index}")
            runs[label].append(row)
            print(f"  round {index + 1} {label} done", flush=True)
    return runs


def summary(runs: dict[str, list[dict[str, float]]]) -> list[str]:
    before, after = runs["before"], runs["after"]
    lines = [
        "| row | before median (min-max) | after median (min-max) | after / before |",
        "|---|---|---|---|",
    ]
    for key in before[0]:
        b, a = [r[key] for r in before], [r[key] for r in after]
        lines.append(
            f"| {key} | {_spread(b)} | {_spread(a)} | "
            f"{statistics.median(a) / statistics.median(b):.3f} |"
        )
    return lines


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the other checkout")
    parser.add_argument("--after", type=Path, default=REPO)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    for tree in trees.values():  # both import from .pyc files, as a deployed package does
        for package in ("core", "handlers", "demo", "protos", "bench"):
            compileall.compile_dir(tree / package, quiet=1)
    load = os.getloadavg()
    runs = run(trees, args.rounds)
    lines = summary(runs)
    lines.append(
        f"load average (1, 5, 15 min) at the start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
        "at the end: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    )
    print("\n".join(lines))
    save("tree_ab", {"trees": {k: str(v) for k, v in trees.items()}, "load": load, "runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
