"""How many InferRequests a gathered version gets (core.runtime.adaptive.GATHER_REQUESTS):
`python -m bench.gather_requests` (under a minute).

The ResNet-50-sized FP16 IR compiled once with the LATENCY hint and dim 0 bounded
[1..GATHER], requests gathered by core.runtime.batching.Batcher (no window, GATHER rows) on a
pool of 1 or 2 InferRequests, as a gathered version serves them: 8 client threads sending
batch-1 requests back to back (req/s, and the rows per inference), then one client alone
(p50 ms, and the same compile's InferRequest called directly), pools alternating block by
block. The load average is printed at the start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from bench.models import resnet50_like
from core.config import BatchingConfig
from core.runtime.adaptive import GATHER
from core.runtime.batching import Batcher


def compiled_gathered(folder: Path) -> ov.CompiledModel:
    path = folder / "model.xml"
    ov.save_model(resnet50_like(seed=0, batch=1), path, compress_to_fp16=True)
    core = ov.Core()
    model = core.read_model(str(path))
    model.reshape({0: ov.PartialShape([ov.Dimension(1, GATHER), 3, 224, 224])})
    return core.compile_model(model, "CPU", {"PERFORMANCE_HINT": "LATENCY"})


def batcher(compiled: ov.CompiledModel, requests: int, rows: list[int]) -> Batcher:
    pool: queue.Queue[ov.InferRequest] = queue.Queue()
    for _ in range(requests):
        pool.put(compiled.create_infer_request())

    def run(request: ov.InferRequest, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        results = request.infer(feed, share_inputs=True, share_outputs=False)
        return {"probabilities": np.asarray(results.to_tuple()[0])}

    return Batcher(
        BatchingConfig(GATHER, 0),
        pool,
        run,
        f"n{requests}",
        on_batch=rows.append,
        workers=requests,
    )


def crowd(target: Batcher, seconds: float, clients: int = 8) -> float:
    x = {"input": np.random.default_rng(0).random((1, 3, 224, 224), np.float32)}
    done = [0] * clients
    stop = time.perf_counter() + seconds

    def client(index: int) -> None:
        while time.perf_counter() < stop:
            target.infer(x)
            done[index] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done) / (time.perf_counter() - started)


def lone(target: Batcher, calls: int) -> list[float]:
    x = {"input": np.random.default_rng(1).random((1, 3, 224, 224), np.float32)}
    return timed(lambda: target.infer(x), calls)


def timed(call: Callable[[], object], calls: int) -> list[float]:
    """Milliseconds of each of `calls` calls, one after the other."""
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1e3)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        compiled = compiled_gathered(Path(tmp))
    rows: dict[int, list[int]] = {1: [], 2: []}
    targets = {n: batcher(compiled, n, rows[n]) for n in (1, 2)}
    for target in targets.values():
        lone(target, 3)  # warm up both batch sizes' shapes
        crowd(target, 0.5)
    direct = compiled.create_infer_request()
    one = {"input": np.random.default_rng(1).random((1, 3, 224, 224), np.float32)}
    direct_p50: list[float] = []
    rps: dict[int, list[float]] = {1: [], 2: []}
    p50: dict[int, list[float]] = {1: [], 2: []}
    mean_rows: dict[int, list[float]] = {1: [], 2: []}
    for block in range(args.blocks):
        order = (1, 2) if block % 2 == 0 else (2, 1)
        for n in order:
            rows[n].clear()
            rps[n].append(crowd(targets[n], args.seconds))
            mean_rows[n].append(statistics.mean(rows[n]))
            p50[n].append(statistics.median(lone(targets[n], args.calls)))
        direct_p50.append(statistics.median(timed(lambda: direct.infer(one), args.calls)))
    load.append(os.getloadavg()[0])
    result: dict[str, Any] = {"load": load, "direct_lone_p50_ms": direct_p50}
    for n in (1, 2):
        result[f"requests_{n}"] = {"rps_8": rps[n], "lone_p50_ms": p50[n], "rows": mean_rows[n]}
        targets[n].close()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
