"""Extra RSS of adaptive execution when `serve` imports compiled blobs (issue 37):
`python -m bench.adaptive_blob_rss [--other-tree DIR]`.

On the ResNet-50-sized FP16 IR (bench.adaptive's configs), per configuration (fixed THROUGHPUT
hint, untuned = adaptive) a first `serve` compiles and exports its blobs into its own cache
folder; the servers measured then start on that folder (every variant imports a blob, as on
every start after the first or with baked blobs), answer a lone request and bursts of 8 until
the throughput variant has served, and their RSS is read (bench.common.rss_mb). Extra RSS is
adaptive minus fixed, against the weights' size. `--other-tree` runs the same servers from
another checkout too (e.g. `git archive` of an earlier commit), rounds alternating between
the trees. The load average is recorded at the start and the end. Results:
bench/results/adaptive_blob_rss.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from bench import cases
from bench.adaptive import MODEL, build, variant_counts
from bench.common import REPO, base_env, free_port, http_ok, rss_mb, save, workdir

EXPORTED_WAIT_S = 60.0


@contextmanager
def serve(tree: Path, config: Path, cache: Path) -> Iterator[tuple[int, int]]:
    """`serve` run from `tree` (its own code), with its own cache folder."""
    port = free_port()
    cmd = [sys.executable, "-m", "handlers.cli", "serve", "--config_path", str(config)]
    cmd += ["--rest_port", str(port), "--port", "0", "--metrics_enable"]
    env = base_env(OVS_CACHE_DIR=str(cache), PYTHONPATH=str(tree))
    log = (cache.parent / f"{cache.name}.log").open("ab")
    proc = subprocess.Popen(cmd, env=env, cwd=tree, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 120
        while not http_ok(port, f"/v2/models/{MODEL}/ready"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"serve from {tree} did not start")
            time.sleep(0.1)
        yield port, proc.pid
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def crowd(port: int, payload: cases.Payload) -> None:
    """A lone request, then bursts of 8 until a throughput variant (if any) has served."""
    factory = cases.rest_cases(port, payload, (cases.REST_KSERVE_BINARY,))[cases.REST_KSERVE_BINARY]
    factory()()
    deadline = time.monotonic() + EXPORTED_WAIT_S
    while True:
        threads = [threading.Thread(target=factory()) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        counts = variant_counts(port)
        if counts.get("throughput", 0.0) or "latency" not in counts:
            return
        if time.monotonic() > deadline:
            raise RuntimeError("the throughput variant never served")
        time.sleep(0.5)


def warm_cache(tree: Path, config: Path, cache: Path, payload: cases.Payload) -> int:
    """Serve once so that every variant exports its blob; -> how many blobs were written."""
    with serve(tree, config, cache) as (port, _):
        crowd(port, payload)
        folder = cache / "blobs"
        deadline = time.monotonic() + EXPORTED_WAIT_S
        settled = -1
        while time.monotonic() < deadline:  # exports run after the first answer, in background
            time.sleep(3.0)
            count = len(list(folder.glob("*.blob")))
            if count and count == settled:
                break
            settled = count
    return len(list((cache / "blobs").glob("*.blob")))


def measured(tree: Path, config: Path, cache: Path, payload: cases.Payload) -> float:
    with serve(tree, config, cache) as (port, pid):
        crowd(port, payload)
        time.sleep(1.0)
        return rss_mb(pid)["rss_mb"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--other-tree", type=Path, help="another checkout to measure alike")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    trees = {"this": REPO} | ({"other": args.other_tree.resolve()} if args.other_tree else {})
    doc: dict[str, Any] = {"load_start": os.getloadavg()}
    root = workdir()
    model_file, configs = build(root)
    doc["weights_mb"] = model_file.with_suffix(".bin").stat().st_size / 2**20
    payload = cases.Payload(MODEL, np.zeros((1, 3, 224, 224), np.float32), b"")
    caches = {(t, c): root / f"cache-{t}-{c}" for t in trees for c in configs}
    doc["blobs"] = {
        f"{t} {c}": warm_cache(trees[t], configs[c], cache, payload)
        for (t, c), cache in caches.items()
    }
    rss: dict[str, list[float]] = {f"{t} {c}": [] for t, c in caches}
    for _ in range(args.rounds):
        for (t, c), cache in caches.items():
            rss[f"{t} {c}"].append(measured(trees[t], configs[c], cache, payload))
    doc["rss_mb"] = rss
    doc["extra_mb"] = {
        t: statistics.median(rss[f"{t} adaptive"]) - statistics.median(rss[f"{t} fixed"])
        for t in trees
    }
    doc["load_end"] = os.getloadavg()
    save("adaptive_blob_rss", doc)
    print(f"load {doc['load_start']} -> {doc['load_end']}; weights {doc['weights_mb']:.1f} MB")
    print("blobs written:", doc["blobs"])
    for key, values in rss.items():
        print(f"{key:18s} RSS MB {[round(v, 1) for v in values]}")
    for tree, extra in doc["extra_mb"].items():
        print(f"{tree}: adaptive extra {extra:.1f} MB = {extra / doc['weights_mb']:.2f}x weights")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
