"""Warm path: raw OpenVINO baselines and the served cases, 1 and N concurrent clients.

Raw baselines run in this process on the same IR and input, before any server is busy:
  latency     one InferRequest of a LATENCY-hint compile, back to back (1 client); the same
              on a THROUGHPUT-hint compile is kept as "1 THROUGHPUT" (serve's default hint)
  throughput  AsyncInferQueue(N jobs) of a THROUGHPUT-hint and of a LATENCY-hint compile;
              the better of the two is the N-client baseline, and is run again just before and
              just after each served N-client run (the machine has slow spells: adjacent runs
              share them; the mean of the two cancels a drift across the served run)
Served rows report p50/p90/p99 and req/s; ratios are p50 / raw p50 with the server's hint
(1 client, paired) and req/s / the mean raw req/s of the runs around it (N clients).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from bench.cases import Factory
from bench.common import Call, Row, many_clients, one_client, paired, summary

HINTS = ("LATENCY", "THROUGHPUT")
# Raw compiled models and queues stay alive until exit: destroying an AsyncInferQueue whose
# last Python callback is still waiting for the GIL can deadlock.
_KEEP: list[object] = []
RAW_CALLS: dict[tuple[str, str], Call] = {}  # (model, hint) -> one raw inference
RAW_QUEUES: dict[str, Callable[[], Row]] = {}  # model -> one run of the faster raw queue


def raw_baselines(
    name: str, model_file: Path, x: np.ndarray, count: int, clients: int, total: int
) -> dict[str, dict[str, Row]]:
    """Per hint: "1" = one InferRequest back to back, "N" = AsyncInferQueue(N jobs). The
    InferRequests stay in RAW_CALLS for the served cases' paired runs."""
    core = ov.Core()
    rows: dict[str, dict[str, Row]] = {}
    runs: dict[str, Callable[[], Row]] = {}
    for hint in HINTS:
        compiled = core.compile_model(str(model_file), "CPU", {"PERFORMANCE_HINT": hint})
        request = compiled.create_infer_request()
        RAW_CALLS[(name, hint)] = lambda request=request: request.infer({0: x})
        runs[hint] = _queue_runner(compiled, x, total, clients)
        rows[hint] = {"1": one_client(RAW_CALLS[(name, hint)], count), str(clients): runs[hint]()}
        _KEEP.extend((compiled, request))
    RAW_QUEUES[name] = runs[max(HINTS, key=lambda hint: rows[hint][str(clients)]["rps"])]
    return rows


def _queue_runner(
    compiled: ov.CompiledModel, x: np.ndarray, total: int, jobs: int
) -> Callable[[], Row]:
    """One AsyncInferQueue with `jobs` requests, run `total` calls per call of the result: `jobs`
    closed-loop clients, each sending again the moment its answer comes (a latency starts when
    its request is free, as a client's starts when it sends). The queue is never destroyed
    during the run: tearing down an AsyncInferQueue whose Python callback thread may still want
    the GIL can deadlock (two full runs hung in futex_do_wait here)."""
    queue = ov.AsyncInferQueue(compiled, jobs)
    times: list[float] = []
    queue.set_callback(lambda request, sent: times.append(time.perf_counter() - sent))
    _KEEP.append((queue, compiled))

    def run() -> Row:
        for _ in range(2 * jobs):
            queue.start_async({0: x}, time.perf_counter())
        queue.wait_all()
        times.clear()
        started = time.perf_counter()
        for _ in range(total):
            queue.get_idle_request_id()  # so the clock starts when the request is sent
            queue.start_async({0: x}, time.perf_counter())
        queue.wait_all()
        wall = time.perf_counter() - started
        return {**summary(times), "rps": total / wall, "n": total}

    return run


def serve_cases(
    factories: dict[str, Factory],
    count: int,
    clients: int,
    per_client: int,
    raw_call: Call,
    raw_queue: Callable[[], Row],
) -> dict[str, dict[str, Row]]:
    """1 client: paired with the raw InferRequest (alternating blocks); N clients: between two
    runs of the faster raw queue, against their mean."""
    rows: dict[str, dict[str, Row]] = {}
    for name, factory in factories.items():
        one, raw = paired(factory(), raw_call, count)
        one.update({f"raw_{key}": raw[key] for key in ("p50_ms", "p90_ms", "p99_ms")})
        before = raw_queue()
        many = many_clients(factory, clients, per_client)
        after = raw_queue()
        many.update(
            raw_rps=(before["rps"] + after["rps"]) / 2,
            raw_p50_ms=(before["p50_ms"] + after["p50_ms"]) / 2,
        )
        rows[name] = {"1": one, str(clients): many}
    return rows


def add_ratios(
    rows: dict[str, dict[str, Row]], raw: dict[str, dict[str, Row]], hint: str, clients: int
) -> None:
    """1 client: against raw OpenVINO compiled with the server's hint, measured in alternating
    blocks with the served calls. N clients: against the faster raw AsyncInferQueue (either
    hint, the best this host can do), the mean of the runs just before and after the served
    one."""
    many = max((by_clients[str(clients)] for by_clients in raw.values()), key=lambda r: r["rps"])
    for by_clients in rows.values():
        served = by_clients["1"]
        for key in ("p50_ms", "p90_ms", "p99_ms"):
            base = served.get(f"raw_{key}") or raw[hint]["1"][key]  # paired run, else the first
            served[f"{key[:3]}_ratio"] = served[key] / base
        row = by_clients[str(clients)]
        row["rps_ratio"] = row["rps"] / (row.get("raw_rps") or many["rps"])
        row["p50_ratio"] = row["p50_ms"] / (row.get("raw_p50_ms") or many["p50_ms"])


def table(results: dict[str, Any], clients: int) -> list[str]:
    head = (
        f"{'model':10} {'server (hint)':24} {'case':24} {'p50 ms':>7} {'p90':>6} "
        f"{'p99':>6} {'/raw':>6} | {clients} cl. {'req/s':>6} {'/raw':>6} {'p50 ms':>6}"
    )
    lines = [head]
    for model, doc in results.items():
        model = doc.get("name", model)
        for hint, raw in doc["raw"].items():
            one, many = raw["1"], raw[str(clients)]
            lines.append(
                f"{model:10} {'raw openvino (' + hint[0] + ')':24} {'infer / AsyncInferQueue':24} "
                f"{one['p50_ms']:7.2f} {one['p90_ms']:6.2f} {one['p99_ms']:6.2f} {1.0:5.2f}x | "
                f"{'':5}{many['rps']:7.1f} {1.0:5.2f}x {many['p50_ms']:6.1f}"
            )
        for entry in doc["servers"].values():
            label = f"{entry['server']} ({entry['hint'][0]})"
            for case, by_clients in entry["cases"].items():
                a, b = by_clients["1"], by_clients[str(clients)]
                lines.append(
                    f"{model:10} {label:24} {case:24} {a['p50_ms']:7.2f} {a['p90_ms']:6.2f} "
                    f"{a['p99_ms']:6.2f} {a['p50_ratio']:5.2f}x | {'':5}{b['rps']:7.1f} "
                    f"{b['rps_ratio']:5.2f}x {b['p50_ms']:6.1f}"
                )
    lines.append(
        "(L) LATENCY / (T) THROUGHPUT hint; 1-client p50 /raw: vs raw OpenVINO with the "
        "same hint; N-client req/s /raw: vs the faster raw AsyncInferQueue"
    )
    return lines
