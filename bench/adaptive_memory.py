"""Designs for adaptive execution in raw OpenVINO (issue 37): `python -m bench.adaptive_memory`.

On the ResNet-50-sized FP16 IR (bench.models), each design is compiled in its own child process
(so its RSS is not mixed with another's) and, for timing, all in one process:
  latency      one compile, PERFORMANCE_HINT LATENCY, 1 InferRequest (the baseline)
  throughput   one compile, PERFORMANCE_HINT THROUGHPUT, 4 InferRequests
  two          latency + throughput compiles of one ov.Model (the adaptive scheme)
  two_cached   the same two imported from a CACHE_DIR with CACHE_MODE OPTIMIZE_SIZE (a blob
               without weights: the weights come from the IR's .bin, memory-mapped)
  streams2     one compile, NUM_STREAMS 2, INFERENCE_NUM_THREADS 4, pinning off (asks each
               stream for every core; the plugin's read-back is recorded)
  latency4     one LATENCY compile with 4 InferRequests serving the crowd too
  latency_blob the LATENCY compile's exported blob imported (memory-mapped, as `serve` imports
               a cached or baked blob): the baseline of the two designs below
  two_blobs    LATENCY and THROUGHPUT each imported from its own blob (two mappings)
  one_blob     the LATENCY blob imported twice from one mapping, the second time with the
               THROUGHPUT hint (the CPU plugin applies the hint's streams at import)
  batchedN     one LATENCY compile with a dynamic batch dimension: a lone request runs as a
               batch of 1, a crowd gathered into batches of N (its 8-job figure: N images per
               inference, back to back)
Per design: extra RSS over `latency` (median of `--rounds` children, VmRSS and its anonymous
and file parts), the lone-request p50 paired with LATENCY's (alternating blocks) and the
8-job AsyncInferQueue req/s against the faster of latency and throughput (alternating).
The machine's load average is recorded at the start and the end. Results:
bench/results/adaptive_memory.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from bench.common import latencies, save, summary
from bench.models import resnet50_like
from bench.warm import _queue_runner

DESIGNS: dict[str, list[tuple[dict[str, Any], int]]] = {
    "latency": [({"PERFORMANCE_HINT": "LATENCY"}, 1)],
    "throughput": [({"PERFORMANCE_HINT": "THROUGHPUT"}, 4)],
    "two": [({"PERFORMANCE_HINT": "LATENCY"}, 1), ({"PERFORMANCE_HINT": "THROUGHPUT"}, 4)],
    "streams2": [({"NUM_STREAMS": 2, "INFERENCE_NUM_THREADS": 4, "ENABLE_CPU_PINNING": False}, 4)],
    "latency4": [({"PERFORMANCE_HINT": "LATENCY"}, 4)],
}
CACHED = "two_cached"
BATCHED = {"batched4": 4, "batched8": 8}
BLOBS: dict[str, list[tuple[str, str, int]]] = {  # (blob's hint, import hint, InferRequests)
    "latency_blob": [("LATENCY", "LATENCY", 1)],
    "two_blobs": [("LATENCY", "LATENCY", 1), ("THROUGHPUT", "THROUGHPUT", 4)],
    "one_blob": [("LATENCY", "LATENCY", 1), ("LATENCY", "THROUGHPUT", 4)],
}
READBACK = (
    "NUM_STREAMS",
    "INFERENCE_NUM_THREADS",
    "ENABLE_CPU_PINNING",
    "INFERENCE_PRECISION_HINT",
)


def status_mb() -> dict[str, float]:
    """This process's VmRSS, RssAnon and RssFile, MB."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) / 1024
    return fields


def compile_design(core: ov.Core, model_file: Path, design: str, cache: Path | None) -> list:
    """The design's compiled models, each with its requests run once (every stream's memory
    is allocated, as after a server's first crowd)."""
    if design in BATCHED:
        return [batched(core, model_file, BATCHED[design])]
    if design in BLOBS:
        return imported(core, model_file, BLOBS[design])
    specs = DESIGNS["two" if design == CACHED else design]
    x = np.zeros((1, 3, 224, 224), np.float32)
    kept: list = []
    model = core.read_model(str(model_file)) if cache is None else None
    for properties, jobs in specs:
        if cache is not None:
            extra = {"CACHE_DIR": str(cache), "CACHE_MODE": "OPTIMIZE_SIZE"}
            compiled = core.compile_model(str(model_file), "CPU", {**properties, **extra})
        else:
            compiled = core.compile_model(model, "CPU", properties)
        queue = ov.AsyncInferQueue(compiled, jobs)
        for _ in range(2 * jobs):
            queue.start_async({0: x})
        queue.wait_all()
        kept.append((compiled, queue))
    del model
    gc.collect()
    return kept


def blob_path(model_file: Path, hint: str) -> Path:
    return model_file.with_name(f"{hint}.blob")


def export_blobs(model_file: Path) -> None:
    core = ov.Core()
    for hint in ("LATENCY", "THROUGHPUT"):
        compiled = core.compile_model(str(model_file), "CPU", {"PERFORMANCE_HINT": hint})
        blob_path(model_file, hint).write_bytes(compiled.export_model().getvalue())


def imported(core: ov.Core, model_file: Path, specs: list[tuple[str, str, int]]) -> list:
    """Each (blob, hint, requests) imported as core.runtime.blobs does (np.memmap,
    copy on write, shared with the tensor), one mapping per blob file, requests run once."""
    x = np.zeros((1, 3, 224, 224), np.float32)
    maps: dict[str, np.memmap] = {}
    kept: list = []
    for blob, hint, jobs in specs:
        if blob not in maps:
            maps[blob] = np.memmap(blob_path(model_file, blob), dtype=np.uint8, mode="c")
        tensor = ov.Tensor(maps[blob], shared_memory=True)
        compiled = core.import_model(tensor, "CPU", {"PERFORMANCE_HINT": hint})
        queue = ov.AsyncInferQueue(compiled, jobs)
        for _ in range(2 * jobs):
            queue.start_async({0: x})
        queue.wait_all()
        kept.append((compiled, queue))
    kept.insert(0, maps)  # the mappings outlive the models that read them
    gc.collect()
    return kept


def batched(core: ov.Core, model_file: Path, rows: int) -> tuple[Any, Any]:
    """The LATENCY compile with a dynamic batch, run once at batch 1 and at batch `rows`."""
    model = core.read_model(str(model_file))
    model.reshape([-1, 3, 224, 224])
    compiled = core.compile_model(model, "CPU", {"PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()
    for size in (1, rows):
        request.infer({0: np.zeros((size, 3, 224, 224), np.float32)})
    return compiled, request


def child(model_file: Path, design: str, cache: Path | None) -> None:
    """Print the RSS of one design compiled in this fresh process."""
    core = ov.Core()
    kept = compile_design(core, model_file, design, cache)
    readback = {k: str(kept[-1][0].get_property(k)) for k in READBACK}
    print(json.dumps({**status_mb(), "readback": readback}))


def memory(model_file: Path, rounds: int, root: Path) -> dict[str, Any]:
    """Per design, the median RSS of `rounds` children (alternating designs each round)."""
    cache = root / "cache"
    designs = [*DESIGNS, CACHED, *BATCHED, *BLOBS]
    runs: dict[str, list[dict[str, Any]]] = {d: [] for d in designs}
    _spawn(model_file, CACHED, cache)  # fills the cache: later children import
    export_blobs(model_file)
    for _ in range(rounds):
        for design in runs:
            runs[design].append(_spawn(model_file, design, cache if design == CACHED else None))
    result = {}
    for design, rows in runs.items():
        med = {k: statistics.median(r[k] for r in rows) for k in ("VmRSS", "RssAnon", "RssFile")}
        result[design] = {
            **med,
            "all_rss": [r["VmRSS"] for r in rows],
            "readback": rows[0]["readback"],
        }
    for design, row in result.items():
        base = result["latency_blob" if design in BLOBS else "latency"]
        row["extra_mb"] = row["VmRSS"] - base["VmRSS"]
        row["extra_anon_mb"] = row["RssAnon"] - base["RssAnon"]
    return result


def _spawn(model_file: Path, design: str, cache: Path | None) -> dict[str, Any]:
    argv = [sys.executable, "-m", "bench.adaptive_memory", "--child", design, str(model_file)]
    if cache is not None:
        argv.append(str(cache))
    out = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


def timing(model_file: Path, blocks: int) -> dict[str, Any]:
    """Lone p50 and 8-job req/s of each single-compile design, alternating between designs
    block by block so that a slow spell of the shared machine slows all alike."""
    core = ov.Core()
    x = np.random.default_rng(0).random((8, 3, 224, 224), np.float32)
    one = x[:1]
    compiled = {
        d: core.compile_model(str(model_file), "CPU", DESIGNS[d][0][0])
        for d in ("latency", "throughput", "streams2")
    }
    lone_calls = {d: _infer_call(c.create_infer_request(), one) for d, c in compiled.items()}
    crowds = {d: _rate(_queue_runner(c, one, 24, 8)) for d, c in compiled.items()}
    dynamic = batched(core, model_file, 8)[1]
    lone_calls["batched"] = _infer_call(dynamic, one)
    for name, rows in BATCHED.items():
        crowds[name] = _batch_rate(dynamic, x[:rows])
    lone: dict[str, list[float]] = {d: [] for d in lone_calls}
    rps: dict[str, list[float]] = {d: [] for d in crowds}
    for call in lone_calls.values():
        latencies(call, 0, warmup=3)
    for _ in range(blocks):
        for d, call in lone_calls.items():
            lone[d] += latencies(call, 4, warmup=0)
        for d, crowd in crowds.items():
            rps[d].append(crowd())
    base = statistics.median(lone["latency"])
    faster = max(statistics.median(rps["latency"]), statistics.median(rps["throughput"]))
    # the `latency4` design's crowd is the LATENCY compile's 8-job queue
    out: dict[str, Any] = {
        d: {**summary(times), "lone_over_latency": statistics.median(times) / base}
        for d, times in lone.items()
    }
    for d, rates in rps.items():
        row = out.setdefault(d, {})
        row.update(
            rps_8=statistics.median(rates),
            rps_all=rates,
            rps_over_faster=statistics.median(rates) / faster,
        )
    return out


def _rate(run: Callable[[], dict[str, Any]]) -> Callable[[], float]:
    return lambda: float(run()["rps"])


def _batch_rate(request: ov.InferRequest, x: np.ndarray, calls: int = 3) -> Callable[[], float]:
    """Images per second of back-to-back inferences of the batch `x`."""

    def run() -> float:
        started = time.perf_counter()
        for _ in range(calls):
            request.infer({0: x})
        return calls * len(x) / (time.perf_counter() - started)

    return run


def _infer_call(request: ov.InferRequest, x: np.ndarray) -> Callable[[], object]:
    return lambda: request.infer({0: x})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--timing-only", action="store_true", help="skip the RSS children")
    args = parser.parse_args()
    if args.child:
        design, model_file, *cache = args.child
        child(Path(model_file), design, Path(cache[0]) if cache else None)
        return
    doc: dict[str, Any] = {"load_start": os.getloadavg()}
    root = Path(tempfile.mkdtemp(prefix="ovs-bench-mem-"))
    model_file = root / "model.xml"
    ov.save_model(resnet50_like(seed=0, batch=1), model_file, compress_to_fp16=True)
    doc["weights_mb"] = model_file.with_suffix(".bin").stat().st_size / 2**20
    doc["memory"] = {} if args.timing_only else memory(model_file, args.rounds, root)
    doc["load_mid"] = os.getloadavg()
    doc["timing"] = timing(model_file, args.blocks)
    doc["load_end"] = os.getloadavg()
    save("adaptive_memory", doc)
    report(doc)


def report(doc: dict[str, Any]) -> None:
    print(f"load {doc['load_start']} -> {doc['load_mid']} -> {doc['load_end']}")
    weights = doc["weights_mb"]
    print(f"weights (FP16 .bin) {weights:.1f} MB")
    for design, row in doc["memory"].items():
        print(
            f"{design:11s} RSS {row['VmRSS']:6.1f} (anon {row['RssAnon']:6.1f}, file "
            f"{row['RssFile']:5.1f}) extra {row['extra_mb']:6.1f} MB = "
            f"{row['extra_mb'] / weights:.2f}x weights  {row['readback']}"
        )
    for design, row in doc["timing"].items():
        lone = (
            f"lone p50 {row['p50_ms']:6.1f} ms ({row['lone_over_latency']:.2f}x LATENCY)"
            if "p50_ms" in row
            else " " * 35
        )
        crowd = (
            f"8 jobs {row['rps_8']:5.1f} req/s ({row['rps_over_faster']:.2f}x faster raw)"
            if "rps_8" in row
            else ""
        )
        print(f"{design:11s} {lone}  {crowd}")


if __name__ == "__main__":
    main()
