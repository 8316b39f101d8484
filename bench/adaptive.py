"""Adaptive execution and JSON decode bench (issue 37): `python -m bench.adaptive [--quick]`.

One run, on the ResNet-50-sized FP16 IR (bench.models), measures:
  raw        AsyncInferQueue(n jobs) of a LATENCY and of a THROUGHPUT compile, n = 1..16
  served     `serve` with plugin_config PERFORMANCE_HINT THROUGHPUT (a fixed hint, OVMS's default
             CPU_THROUGHPUT_AUTO) and `serve` with no tuning (adaptive), KServe binary REST,
             n = 1..16 clients against the same server process, no setting changed between them
  targets    adaptive 1 client p50 / raw LATENCY p50 (alternating blocks); adaptive 8 clients
             req/s / the faster raw queue (mean of runs just before and after); a mixed phase
             (bursts of 8 separated by lone requests) on the same server, and on the fixed one
             for reference (a burst's ramp and HTTP through this front); the adaptive server's
             extra RSS over the fixed one against the weights' size; REST JSON decode (TFS and
             KServe, 1x3x224x224 f32) against np.fromstring(sep=",") and a bare simdjson parse of
             the same bytes; end-to-end REST JSON p50 against KServe binary p50
Writes bench/results/adaptive.json, bench/adaptive.png and prints the table. The machine's
load average is recorded at the start and the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import orjson

from bench import cases
from bench.common import (
    REPO,
    Row,
    base_env,
    free_port,
    http_ok,
    latencies,
    many_clients,
    ov_serve_cmd,
    paired,
    process,
    rss_mb,
    save,
    summary,
    workdir,
)
from bench.models import resnet50_like
from bench.warm import _queue_runner

CLIENTS = (1, 2, 4, 8, 16)
MODEL = "resnet50"
PLOT = Path(__file__).parent / "adaptive.png"
_KEEP: list[object] = []  # raw compiled models outlive their queues (see bench.warm)


def build(root: Path) -> tuple[Path, dict[str, Path]]:
    """The FP16 IR and two configs serving it: adaptive (untuned) and fixed THROUGHPUT."""
    folder = root / "repo" / MODEL / "1"
    folder.mkdir(parents=True)
    ov.save_model(resnet50_like(seed=0, batch=1), folder / "model.xml", compress_to_fp16=True)
    configs = {}
    for label, options in (
        ("adaptive", {}),
        ("fixed", {"plugin_config": {"PERFORMANCE_HINT": "THROUGHPUT"}}),
    ):
        entry = {"config": {"name": MODEL, "base_path": MODEL, **options}}
        path = root / "repo" / f"{label}.json"
        path.write_text(json.dumps({"model_config_list": [entry]}))
        configs[label] = path
    return folder / "model.xml", configs


def per_level(clients: int, quick: bool) -> int:
    """Requests per client at one level: a few seconds per level."""
    total = 24 if quick else 48
    return max(3, total // clients)


# -- raw OpenVINO ----------------------------------------------------------------------------


def raw_sweep(
    model_file: Path, x: np.ndarray, quick: bool
) -> tuple[
    dict[str, dict[int, Row]], dict[str, Callable[[], object]], dict[int, Callable[[], Row]]
]:
    """Per hint and client count, an AsyncInferQueue run; the LATENCY InferRequest for the
    paired 1-client runs; per count, the faster queue (re-run around served runs)."""
    core = ov.Core()
    rows: dict[str, dict[int, Row]] = {}
    runners: dict[str, dict[int, Callable[[], Row]]] = {}
    single: dict[str, Callable[[], object]] = {}
    for hint in ("LATENCY", "THROUGHPUT"):
        compiled = core.compile_model(str(model_file), "CPU", {"PERFORMANCE_HINT": hint})
        request = compiled.create_infer_request()
        single[hint] = _infer_call(request, x)
        _KEEP.extend((compiled, request))
        runners[hint] = {n: _queue_runner(compiled, x, n * per_level(n, quick), n) for n in CLIENTS}
        rows[hint] = {n: runners[hint][n]() for n in CLIENTS}
    faster = {n: runners[max(rows, key=lambda h: rows[h][n]["rps"])][n] for n in CLIENTS}
    return rows, single, faster


def _infer_call(request: ov.InferRequest, x: np.ndarray) -> Callable[[], object]:
    return lambda: request.infer({0: x})


# -- the server ------------------------------------------------------------------------------


@contextmanager
def server(config: Path, log: Path, cache: Path, tree: Path = REPO) -> Iterator[tuple[int, int]]:
    """`serve` of `tree` (this checkout by default) with its own cache folder: no compiled
    blob of an earlier run is imported."""
    port = free_port()
    cmd = [*ov_serve_cmd(config, port), "--metrics_enable"]
    with process(
        cmd,
        base_env(OVS_CACHE_DIR=str(cache), PYTHONPATH=str(tree)),
        lambda: http_ok(port, f"/v2/models/{MODEL}/ready"),
        log=log,
        cwd=tree,
    ) as proc:
        yield port, proc.pid


def first_answers(
    configs: dict[str, Path], root: Path, payload: cases.Payload, rounds: int
) -> dict[str, float]:
    """Median seconds from launch to the first answer, per config, launches alternating."""
    times: dict[str, list[float]] = {label: [] for label in configs}
    for index in range(rounds):
        for label, config in configs.items():
            launched = time.perf_counter()
            with server(
                config, root / f"{label}-start.log", root / f"start-cache-{label}-{index}"
            ) as (port, _):
                cases.rest_cases(port, payload, (cases.REST_KSERVE_BINARY,))[
                    cases.REST_KSERVE_BINARY
                ]()()
                times[label].append(time.perf_counter() - launched)
    return {label: statistics.median(values) for label, values in times.items()}


def variant_counts(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    found = re.findall(r'ov_serverless_variant_requests\{[^}]*variant="(\w+)"\} ([0-9.e+]+)', text)
    return {variant: float(value) for variant, value in found}


def streams(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    found = re.search(r"ovms_streams\{[^}]*\} ([0-9.]+)", text)
    return float(found.group(1)) if found else 0.0


def adapted(port: int) -> bool:
    """Is the adaptive server's adaptation in place: requests gathered (a one-row model,
    core.runtime.adaptive), or a throughput variant compiled?"""
    return "batched" in variant_counts(port) or streams(port) >= 2


def served_sweep(
    factory: cases.Factory,
    port: int,
    quick: bool,
    raw_single: Callable[[], object],
    faster: dict[int, Callable[[], Row]],
) -> dict[int, Row]:
    """Every client count against one server; 1 client paired with raw LATENCY, 8 clients
    between two runs of the faster raw queue; each row with the variants that served it."""
    rows: dict[int, Row] = {}
    for n in CLIENTS:
        before = variant_counts(port)
        if n == 1:
            row, raw = paired(factory(), raw_single, per_level(1, quick) * 2)
            row["raw_p50_ms"] = raw["p50_ms"]
        else:
            raw_before = faster[n]() if n == 8 else None
            row = many_clients(factory, n, per_level(n, quick))
            if raw_before is not None:
                raw_after = faster[8]()
                row["raw_rps"] = (raw_before["rps"] + raw_after["rps"]) / 2
        after = variant_counts(port)
        for variant, count in after.items():
            row[f"served_{variant}"] = count - before.get(variant, 0.0)
        rows[n] = row
    return rows


def mixed_phase(factory: cases.Factory, port: int, cycles: int) -> dict[str, Any]:
    """Bursts of 8 concurrent requests separated by 3 lone requests: lone p50, burst req/s."""
    lone: list[float] = []
    bursts: list[float] = []
    burst_rows: list[float] = []
    call = factory()
    before = variant_counts(port)
    for _ in range(cycles):
        time.sleep(0.05)  # the previous burst has drained
        lone += latencies(call, 3, warmup=0)
        gate = threading.Barrier(8)
        times: list[float] = []

        def one(gate: threading.Barrier = gate, times: list[float] = times) -> None:
            own = factory()
            own()  # the connection is open before the burst starts
            gate.wait()
            started = time.perf_counter()
            own()
            times.append(time.perf_counter() - started)

        threads = [threading.Thread(target=one) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        bursts.append(max(times))
        burst_rows += times
    after = variant_counts(port)
    return {
        "lone": summary(lone),
        "burst": summary(burst_rows),
        "burst_rps": 8 * len(bursts) / sum(bursts),
        "served": {k: v - before.get(k, 0.0) for k, v in after.items()},
    }


# -- JSON ------------------------------------------------------------------------------------


def bare_parse(body: bytes) -> Callable[[], object]:
    """A bare simdjson parse of a TFS `instances` body into float64 (no checks, no dtype)."""
    import simdjson

    parser = simdjson.Parser()

    def parse() -> object:
        doc: Any = parser.parse(body)
        array = np.frombuffer(doc["instances"].as_buffer(of_type="d"), np.float64)
        del doc
        return array

    return parse


def decode_bench(x: np.ndarray, repeat: int) -> dict[str, float]:
    """Median ms of the server's REST JSON decode of a 1x3x224x224 f32 body (TFS row and
    KServe) against np.fromstring(sep=",") and a bare simdjson parse of the same numbers."""

    from core.codecs import fast_json, kserve_rest, tfs_rest
    from core.tensors import dtypes
    from core.tensors.spec import TensorSpec

    spec = TensorSpec("input", dtypes.from_ov("f32"), tuple((d, d) for d in x.shape), "")
    tfs = orjson.dumps({"instances": x.tolist()})
    kserve = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "input",
                    "shape": list(x.shape),
                    "datatype": "FP32",
                    "data": x.ravel().tolist(),
                }
            ]
        }
    )
    csv = tfs[len(b'{"instances":') : -1].replace(b"[", b"").replace(b"]", b"")
    bare = bare_parse(tfs)

    named = orjson.dumps({"instances": [{"input": row} for row in x.tolist()]})
    calls = {
        "np_fromstring_ms": lambda: np.fromstring(csv, sep=","),
        "simdjson_bare_ms": bare,
        "tfs_decode_ms": lambda: tfs_rest.decode(tfs, {"input": spec}),
        "kserve_decode_ms": lambda: kserve_rest.decode(kserve, None, {"input": spec}),
        "tfs_named_rows_ms": lambda: tfs_rest.decode(named, {"input": spec}),
    }
    out = {
        name: 1e3 * statistics.median(latencies(call, repeat, warmup=2))
        for name, call in calls.items()
    }
    saved, fast_json.simdjson = fast_json.simdjson, None  # the orjson path every body took before
    try:
        out["tfs_exact_ms"] = 1e3 * statistics.median(latencies(calls["tfs_decode_ms"], repeat))
        out["tfs_named_rows_exact_ms"] = 1e3 * statistics.median(
            latencies(calls["tfs_named_rows_ms"], repeat)
        )
    finally:
        fast_json.simdjson = saved
    out["body_bytes"] = float(len(tfs))
    return out


# -- report ----------------------------------------------------------------------------------


def weights_mb(model_file: Path) -> dict[str, float]:
    params = int(ov.Core().read_model(str(model_file)).get_rt_info("parameters").astype(str))
    return {
        "bin_mb": model_file.with_suffix(".bin").stat().st_size / 2**20,
        "f32_mb": params * 4 / 2**20,
    }


def plot(raw: dict[str, dict[int, Row]], served: dict[str, dict[int, Row]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    lines = {
        "raw LATENCY": raw["LATENCY"],
        "raw THROUGHPUT": raw["THROUGHPUT"],
        "serve fixed THROUGHPUT": served["fixed"],
        "serve adaptive": served["adaptive"],
    }
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for label, rows in lines.items():
        style = "--" if label.startswith("raw") else "-"
        left.plot(CLIENTS, [rows[n]["p50_ms"] for n in CLIENTS], style, marker="o", label=label)
        right.plot(CLIENTS, [rows[n]["rps"] for n in CLIENTS], style, marker="o", label=label)
    for axis, title in ((left, "p50 latency (ms)"), (right, "throughput (req/s)")):
        axis.set_xscale("log", base=2)
        axis.set_xticks(CLIENTS, [str(n) for n in CLIENTS])
        axis.set_xlabel("concurrent clients")
        axis.set_title(title)
        axis.grid(alpha=0.3)
    left.set_yscale("log")  # so 1 client's 20 ms and 16 clients' 300 ms both read
    left.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    left.yaxis.set_major_formatter(ticker.ScalarFormatter())
    left.yaxis.set_minor_formatter(ticker.NullFormatter())
    right.legend(fontsize=8)
    figure.suptitle("ResNet-50-sized FP16 IR, 2-vCPU host, KServe binary REST")
    figure.tight_layout()
    figure.savefig(PLOT, dpi=90)


def table(doc: dict[str, Any]) -> list[str]:
    raw, served = doc["raw"], doc["served"]
    lines = [
        f"load average at start {doc['load_start']}, end {doc['load_end']}",
        f"{'clients':>7} | "
        + " | ".join(
            f"{k:>22}" for k in ("raw LATENCY", "raw THROUGHPUT", "serve fixed", "serve adaptive")
        ),
        f"{'':>7} | " + " | ".join(f"{'p50 ms':>10} {'req/s':>11}" for _ in range(4)),
    ]
    for n in CLIENTS:
        rows = (raw["LATENCY"][n], raw["THROUGHPUT"][n], served["fixed"][n], served["adaptive"][n])
        lines.append(
            f"{n:>7} | " + " | ".join(f"{r['p50_ms']:>10.1f} {r['rps']:>11.1f}" for r in rows)
        )
    for key, value in doc["targets"].items():
        lines.append(f"{key}: {value}")
    return lines


def targets(doc: dict[str, Any]) -> dict[str, Any]:
    adaptive, fixed = doc["served"]["adaptive"], doc["served"]["fixed"]
    one, eight = adaptive[1], adaptive[8]
    mixed, dec, json_e2e = doc["mixed"]["adaptive"], doc["decode"], doc["json_e2e"]
    raw_lat = one["raw_p50_ms"]  # the paired raw LATENCY run on the same server's turn
    best8 = max(doc["raw"][h][8]["rps"] for h in ("LATENCY", "THROUGHPUT"))
    r = {
        "one": one["p50_ms"] / one["raw_p50_ms"],
        "fixed_one": fixed[1]["p50_ms"] / fixed[1]["raw_p50_ms"],
        "eight": eight["rps"] / eight["raw_rps"],
        "fixed_eight": fixed[8]["rps"] / fixed[8]["raw_rps"],
        "tfs_json": json_e2e["tfs_json_p50_ms"] / json_e2e["binary_p50_ms"],
        "kserve_json": json_e2e["kserve_json_p50_ms"] / json_e2e["binary_p50_ms"],
        "lone": mixed["lone"]["p50_ms"] / raw_lat,
    }
    decode_ms = ("np_fromstring_ms", "simdjson_bare_ms", "tfs_decode_ms", "kserve_decode_ms")
    exact_ms = ("tfs_exact_ms", "tfs_named_rows_exact_ms")
    return {
        "adaptive 1 client p50 / raw LATENCY p50 (paired)": f"{r['one']:.2f} (target <= 1.10)",
        "fixed 1 client p50 / raw LATENCY p50 (paired)": f"{r['fixed_one']:.2f}",
        "adaptive 8 clients req/s / faster raw queue (around)": f"{r['eight']:.2f} "
        "(target >= 0.95)",
        "fixed 8 clients req/s / faster raw queue (around)": f"{r['fixed_eight']:.2f}",
        "mixed: lone p50 / raw LATENCY p50 (paired run)": f"{r['lone']:.2f}",
        "mixed: burst req/s / faster raw queue at 8 (adaptive, fixed)": ", ".join(
            f"{doc['mixed'][k]['burst_rps'] / best8:.2f}" for k in ("adaptive", "fixed")
        ),
        "mixed: requests per variant": mixed["served"],
        "decode TFS / np.fromstring": f"{dec['tfs_decode_ms'] / dec['np_fromstring_ms']:.3f}"
        " (target <= 1.5)",
        "decode KServe / np.fromstring": f"{dec['kserve_decode_ms'] / dec['np_fromstring_ms']:.3f}",
        "decode TFS / bare simdjson parse": f"{dec['tfs_decode_ms'] / dec['simdjson_bare_ms']:.2f}",
        "decode ms (fromstring, simdjson, TFS, KServe)": ", ".join(
            f"{dec[k]:.1f}" for k in decode_ms
        ),
        "decode ms without the simdjson path (TFS, TFS named rows)": ", ".join(
            f"{dec[k]:.1f}" for k in exact_ms
        ),
        "decode ms TFS named rows (fast path)": f"{dec['tfs_named_rows_ms']:.1f}",
        "REST JSON p50 / KServe binary p50 (paired, 1 client)": f"{r['tfs_json']:.2f} (TFS), "
        f"{r['kserve_json']:.2f} (KServe) (target <= 1.10)",
        "adaptive extra RSS / weights": doc["rss"]["summary"],
        "launch to first answer s, median of alternating launches (fixed, adaptive)": ", ".join(
            f"{doc['first_answer_s'][k]:.2f}" for k in ("fixed", "adaptive")
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests per level")
    args = parser.parse_args(argv)
    doc: dict[str, Any] = {"load_start": os.getloadavg()}
    root = workdir()
    model_file, configs = build(root)
    x = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
    payload = cases.Payload(MODEL, x, b"")
    raw, raw_single, faster = raw_sweep(model_file, x, args.quick)
    doc["raw"] = raw
    doc["served"], doc["rss_mb"], doc["mixed"] = {}, {}, {}
    doc["first_answer_s"] = first_answers(configs, root, payload, 2 if args.quick else 3)
    for label in ("fixed", "adaptive"):
        with server(configs[label], root / f"{label}.log", root / f"cache-{label}") as (port, pid):
            binary = cases.rest_cases(port, payload, (cases.REST_KSERVE_BINARY,))
            factory = binary[cases.REST_KSERVE_BINARY]
            factory()()
            deadline = time.monotonic() + 60
            while label == "adaptive" and not adapted(port) and time.monotonic() < deadline:
                time.sleep(0.2)  # the adaptation starts after the first answer
            doc["served"][label] = served_sweep(
                factory, port, args.quick, raw_single["LATENCY"], faster
            )
            doc["rss_mb"][label] = rss_mb(pid)
            doc["mixed"][label] = mixed_phase(factory, port, 4 if args.quick else 8)
            if label == "adaptive":
                json_cases = cases.rest_cases(
                    port, payload, (cases.REST_TFS_JSON, cases.REST_KSERVE_JSON)
                )
                count = 20 if args.quick else 40
                tfs, binary_row = paired(json_cases[cases.REST_TFS_JSON](), factory(), count)
                kserve, _ = paired(json_cases[cases.REST_KSERVE_JSON](), factory(), count)
                doc["json_e2e"] = {
                    "tfs_json_p50_ms": tfs["p50_ms"],
                    "kserve_json_p50_ms": kserve["p50_ms"],
                    "binary_p50_ms": binary_row["p50_ms"],
                }
    doc["decode"] = decode_bench(x, 10 if args.quick else 25)
    weights = weights_mb(model_file)
    extra = doc["rss_mb"]["adaptive"]["rss_mb"] - doc["rss_mb"]["fixed"]["rss_mb"]
    doc["rss"] = {
        **weights,
        "extra_mb": extra,
        "summary": f"{extra:.0f} MB = {extra / weights['bin_mb']:.2f}x the FP16 .bin "
        f"({weights['bin_mb']:.0f} MB), {extra / weights['f32_mb']:.2f}x "
        f"the weights in f32 ({weights['f32_mb']:.0f} MB) (target <= 0.30)",
    }
    doc["load_end"] = os.getloadavg()
    doc["targets"] = targets(doc)
    save("adaptive", doc)
    plot(raw, doc["served"])
    print("\n".join(table(doc)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
