"""Markdown tables of a bench run: `python -m bench.report [bench/results/bench.json]`.

Prints what bench/RESULTS.md holds: the warm table (every model, server and case, with both
ratios), the before/after rows of `--ab`, and the cold-start table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench import cold
from bench.common import RESULTS

AB_LABELS = ("no simdjson", "nireq=2", "batching")


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else RESULTS / "bench.json"
    doc = json.loads(path.read_text())
    print("\n".join(render(doc)))
    return 0


def render(doc: dict[str, Any]) -> list[str]:
    m = doc["machine"]
    lines = [
        f"Measured {m['date']} on {m['cpu']}, {m['cores']} vCPU, {m['memory_gib']} GiB, "
        f"Python {m['python']}, OpenVINO {m['openvino']} ({', '.join(m['isa'])}); "
        f"`python -m bench.run {' '.join(doc.get('argv', []))}` ({doc['wall_s']:.0f} s). "
        "Clients run on the same cores as the server.",
        "",
    ]
    if "warm" in doc:
        lines += _warm(doc["warm"], doc["clients"])
    if "floor" in doc:
        lines += [
            "",
            "Transport floor (bench/floor.py): the KServe request (REST binary, gRPC "
            "raw contents) against a server that only sleeps the raw THROUGHPUT p50, "
            "paired with a bare sleep; no server on that transport can go below this "
            "ratio here",
            "",
            "| model | transport | sleep ms | p50 ms | bare sleep p50 | p50 / sleep |",
            "|---|---|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {name} | {transport} | {row['sleep_ms']:.2f} | {row['p50_ms']:.2f} | "
            f"{row['raw_p50_ms']:.2f} | {row['p50_ratio']:.2f} |"
            for transport, table in doc["floor"].items()
            for name, row in table.items()
        ]
    if "cold" in doc:
        lines += [
            "",
            f"Cold start, {doc['cold']['model']}: process start -> first 200, median "
            "of the interleaved runs, ms; RSS after 20 requests (tree: root RSS + "
            "children's private memory), peak = sum of VmHWM",
            "",
        ]
        lines += _cold(doc["cold"])
    return lines


def _warm(results: dict[str, Any], clients: int) -> list[str]:
    n = str(clients)
    lines = [
        f"Warm: 1-client p50 (ms; / raw OpenVINO with the same hint) | {clients}-client "
        f"req/s (/ the faster raw AsyncInferQueue({clients}), mean of the runs just before "
        "and after)",
        "",
        "| model | server (hint) | case | p50 ms | p90 | p99 | raw p50 (paired) | p50 / raw | "
        f"{clients}-client req/s | raw req/s (before/after) | / raw |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    ab = [
        f"| model | variant | case | p50 ms | p50 / raw | {clients}-client req/s | / raw |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for doc in results.values():
        name = doc["name"]
        for hint, raw in doc["raw"].items():
            one, many = raw["1"], raw[n]
            lines.append(
                f"| {name} | raw OpenVINO ({hint}) | InferRequest / AsyncInferQueue | "
                f"{one['p50_ms']:.2f} | {one['p90_ms']:.2f} | {one['p99_ms']:.2f} | | "
                f"1.00 | {many['rps']:.0f} | | |"
            )
        for entry in doc["servers"].values():
            for case, by in entry["cases"].items():
                a, b = by["1"], by[n]
                if entry["server"] in AB_LABELS:
                    ab.append(
                        f"| {name} | {entry['server']} | {case} | {a['p50_ms']:.2f} | "
                        f"{a['p50_ratio']:.2f} | {b['rps']:.0f} | {b['rps_ratio']:.2f} |"
                    )
                    continue
                lines.append(
                    f"| {name} | {entry['server']} ({entry['hint']}) | {case} | "
                    f"{a['p50_ms']:.2f} | {a['p90_ms']:.2f} | {a['p99_ms']:.2f} | "
                    f"{a.get('raw_p50_ms', 0):.2f} | {a['p50_ratio']:.2f} | "
                    f"{b['rps']:.0f} | {b.get('raw_rps', 0):.0f} | "
                    f"{b['rps_ratio']:.2f} |"
                )
    if len(ab) > 2:
        lines += [
            "",
            "Before/after (same run, `--ab`): the server without one optimisation, "
            "or with the opt-in dynamic batching",
            "",
            *ab,
        ]
    return lines


def _cold(result: dict[str, Any]) -> list[str]:
    head = [s[:-2] for s in cold.STAGES]
    lines = [
        "| scenario | "
        + " | ".join(head)
        + " | vs minimal | same round, range | RSS MB | peak MB |",
        "|---|" + "---:|" * (len(head) + 4),
    ]
    for name, row in result["rows"].items():
        median, low, high = cold.ratio(result, name)
        cells = " | ".join(f"{1e3 * row[s]:.0f}" if s in row else "" for s in cold.STAGES)
        lines.append(
            f"| {name} | {cells} | {median:.2f}x | {low:.2f}-{high:.2f} | "
            f"{row['rss_mb']:.0f} | {row['peak_mb']:.0f} |"
        )
    return lines


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
