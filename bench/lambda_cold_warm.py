"""Lambda handler cold vs warm invocation on the 224x224 classifier (KServe binary, HTTP API).

    python -m bench.lambda_cold_warm [--cold-runs 5] [--count 100]

Cold: a fresh Python process per run imports handlers.aws_lambda (init phase: openvino import,
config, read + compile) and serves its first invocation, either with an empty OpenVINO
compile cache or with a pre-populated one (models and cache baked into the image). Warm:
further invocations of one instance. Interpreter startup is reported separately ("process").
Writes bench/results/lambda.json.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import orjson

from bench.common import latencies, save, summary, workdir
from demo.models import classifier
from demo.models import save as save_model

EVENT = Path(__file__).parents[1] / "tests" / "events" / "sam-cli-rendered" / "HttpApi.json"
CHILD = """
import json, sys, time
started = time.perf_counter()
import handlers.aws_lambda as aws
imported = time.perf_counter()
event = json.load(open(sys.argv[1]))
class Context: aws_request_id = "bench"
reply = aws.handler(event, Context())
done = time.perf_counter()
assert reply["statusCode"] == 200, reply["body"][:300]
print("BENCH " + json.dumps({"import_init_s": imported - started,
                             "first_invoke_s": done - imported, "total_s": done - started,
                             "cold": aws.COLD_START}))
"""


def make_event(x: np.ndarray) -> dict[str, Any]:
    header = orjson.dumps({
        "inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes}}],
        "outputs": [{"name": "probabilities", "parameters": {"binary_data": True}}]})
    event: dict[str, Any] = json.loads(EVENT.read_text())
    event["rawPath"] = event["requestContext"]["http"]["path"] = "/v2/models/classifier/infer"
    event["headers"] = {"content-type": "application/octet-stream",
                        "inference-header-content-length": str(len(header))}
    event.update(body=base64.b64encode(header + x.tobytes()).decode(), isBase64Encoded=True)
    return event


def cold_run(env: dict[str, str], event_file: Path) -> dict[str, Any]:
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, str(event_file)], env=env, check=True,
                         capture_output=True, text=True, timeout=120).stdout
    wall = time.perf_counter() - started
    (line,) = [item for item in out.splitlines() if item.startswith("BENCH ")]
    result: dict[str, Any] = json.loads(line[6:])
    result["process_s"] = wall
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cold-runs", type=int, default=5)
    parser.add_argument("--count", type=int, default=100)
    args = parser.parse_args()
    root = workdir()
    save_model(classifier(seed=0, batch=None), root / "classifier" / "1")
    (root / "config.json").write_text('{"model_config_list": [{"config": {"name": '
                                      '"classifier", "base_path": "classifier"}}]}')
    x = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
    event = make_event(x)
    event_file = root / "event.json"
    event_file.write_text(json.dumps(event))
    base = {k: v for k, v in os.environ.items() if not k.startswith("OVS_")}
    base |= {"OVS_CONFIG_PATH": str(root / "config.json"), "AWS_LAMBDA_FUNCTION_NAME": "bench"}
    runs: dict[str, list[dict[str, Any]]] = {"cold, empty compile cache": [],
                                             "cold, compile cache hit": []}
    for index in range(args.cold_runs):
        fresh = base | {"OVS_CACHE_DIR": str(root / f"cache-{index}")}
        runs["cold, empty compile cache"].append(cold_run(fresh, event_file))
    shared = base | {"OVS_CACHE_DIR": str(root / "cache-0")}  # populated by the first run
    for _ in range(args.cold_runs):
        runs["cold, compile cache hit"].append(cold_run(shared, event_file))

    os.environ.update(shared)
    import handlers.aws_lambda as aws

    class Context:
        aws_request_id = "bench-warm"

    with contextlib.redirect_stdout(io.StringIO()):  # the one cold-start log line
        aws.handler(event, Context())
    warm = latencies(lambda: aws.handler(event, Context()), args.count)
    rows: dict[str, dict[str, float]] = {}
    for name, items in runs.items():
        rows[name] = {key: 1e3 * statistics.median(r[key] for r in items)
                      for key in ("process_s", "import_init_s", "first_invoke_s", "total_s")}
        rows[name]["compile_ms"] = 1e3 * statistics.median(
            r["cold"]["models"]["classifier/1"]["compile_s"] for r in items)
    rows["warm invoke"] = summary(warm)
    print(f"{'case':28} {'process':>9} {'import+init':>12} {'compile':>9} {'1st invoke':>11}")
    for name in runs:
        row = rows[name]
        print(f"{name:28} {row['process_s']:9.1f} {row['import_init_s']:12.1f} "
              f"{row['compile_ms']:9.1f} {row['first_invoke_s']:11.1f}   (ms, median)")
    w = rows["warm invoke"]
    print(f"{'warm invoke':28} p50 {w['p50_ms']:.2f} ms  p90 {w['p90_ms']:.2f} ms  "
          f"p99 {w['p99_ms']:.2f} ms  (n={args.count})")
    path = save("lambda", {"machine": platform.platform(), "cpus": os.cpu_count(),
                           "openvino": ov.__version__, "cold_runs": args.cold_runs,
                           "count": args.count, "rows": rows, "cold_detail": runs})
    print(path)


if __name__ == "__main__":
    main()
