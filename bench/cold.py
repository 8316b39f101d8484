"""Cold start (process start -> first 200) and memory, per host, against a minimal script.

Two kinds of run, each in a fresh process with an empty OVS_CACHE_DIR unless said otherwise:
  probe  bench/cold_child.py: the host's own import + init + first request in one process,
         with the stage breakdown (import, config, download, read, compile, first infer)
  real   the real command (`functions-framework ...`, `ov-serverless serve`, `mlserver start`)
         timed from Popen to the first 200 of a predict over HTTP; then RSS idle / peak of
         its process tree (gunicorn: arbiter + worker)
`functions-framework floor` (bench/ff_floor.py) is the least function functions-framework can
run: what it adds to the minimal script is the framework's own cost. `control socket on`
(bench/ff_control_socket.py) is the real row without handlers/cloud_run.py's turning gunicorn's
control socket off.
The Lambda probe *is* the real thing (the runtime imports the module, then calls handler).
"""

from __future__ import annotations

import base64
import compileall
import functools
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from bench import peer
from bench.cases import kserve_binary
from bench.common import REPO, base_env, free_port, http_ok, median_of, process, rss_mb

CHILD = REPO / "bench" / "cold_child.py"
EVENT = REPO / "tests" / "events" / "sam-cli-rendered" / "HttpApi.json"
STAGES = (
    "process_s",
    "import_s",
    "config_s",
    "download_s",
    "read_s",
    "compile_s",
    "other_s",
    "first_infer_s",
    "total_s",
)


def request_file(
    root: Path,
    model: str,
    model_file: Path,
    x: np.ndarray,
    extra: dict[str, Any] | None = None,
    name: str = "cold-request",
) -> Path:
    http = kserve_binary(model, x)
    event: dict[str, Any] = json.loads(EVENT.read_text())
    event["rawPath"] = event["requestContext"]["http"]["path"] = http["path"]
    event["headers"] = {k.lower(): v for k, v in http["headers"].items()}
    event.update(body=base64.b64encode(http["body"]).decode(), isBase64Encoded=True)
    doc = {
        "event": event,
        "http": {**http, "body": http["body"].hex()},
        "model_file": str(model_file),
        "shape": list(x.shape),
        **(extra or {}),
    }
    path = root / f"{name}.json"
    path.write_text(json.dumps(doc))
    return path


def probe(host: str, request: Path, env: dict[str, str], tree: Path = REPO) -> dict[str, float]:
    """One cold start of `host` by `tree`'s bench/cold_child.py (another checkout's, to
    compare two trees: env's PYTHONPATH must name it too)."""
    started = time.time()
    out = subprocess.run(
        [sys.executable, str(tree / CHILD.relative_to(REPO)), host, str(request)],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if out.returncode != 0:
        raise RuntimeError(f"cold {host}: {out.stderr[-2000:]}")
    (line,) = [item for item in out.stdout.splitlines() if item.startswith("BENCH ")]
    r = json.loads(line[6:])
    init = r["t_ready"] - r["t_imported"]
    config = r.get("config_s", max(0.0, init - r.get("config_apply_s", init)))
    work = r["download_s"] + r["read_s"] + r["compile_s"]
    return {
        "process_s": r["t_main"] - started,
        "import_s": r["t_imported"] - r["t_main"],
        "config_s": config,
        "download_s": r["download_s"],
        "read_s": r["read_s"],
        "compile_s": r["compile_s"],
        "other_s": max(0.0, init - config - work),
        "first_infer_s": r["t_done"] - r["t_ready"],
        "total_s": r["t_done"] - started,
        "rss_mb": r["rss_mb"],
        "peak_mb": r["peak_mb"],
    }


def real(
    cmd: list[str], port: int, http: dict[str, Any], env: dict[str, str], log: Path
) -> dict[str, float]:
    """Popen -> first 200 of a predict; then idle and peak RSS after 20 more requests."""
    body, headers = http["body"], http["headers"]
    started = time.time()
    with process(
        cmd, env, lambda: http_ok(port, http["path"], "POST", body, headers), log=log
    ) as proc:
        first = time.time() - started
        for _ in range(20):
            http_ok(port, http["path"], "POST", body, headers)
        time.sleep(0.5)
        memory = rss_mb(proc.pid)
    return {"total_s": first, **memory}


def compile_sources() -> None:
    """Byte-compile the checkout, as `pip install` does in every image: with
    PYTHONDONTWRITEBYTECODE set (this machine) an editable checkout has no .pyc, and each cold
    start would compile our modules (~50 ms) while openvino and flask load from bytecode."""
    for package in ("core", "handlers", "demo", "protos"):
        compileall.compile_dir(REPO / package, quiet=1)


def run(
    root: Path,
    model: str,
    model_dir: Path,
    model_file: Path,
    x: np.ndarray,
    repeat: int,
    remotes: list[dict[str, Any]],
    with_peer: bool,
    variants: dict[str, dict[str, str]] | None = None,
    ff_variants: dict[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    """Every scenario `repeat` times, interleaved (round after round of every scenario, so a
    slow spell of the machine hits all rows alike); medians. `variants` / `ff_variants`: extra
    env sets to compare, for the Lambda probe / the real functions-framework. `remotes`: the
    buckets on emulators (bench/run.py's s3_upload, azure_upload, gcs_upload), each with its
    own minimal script that downloads through the provider's SDK."""
    compile_sources()
    request = request_file(root, model, model_file, x)
    http = kserve_binary(model, x)
    local = {"OVS_MODEL_NAME": model, "OVS_MODEL_PATH": str(model_dir), "OVS_LOG_LEVEL": "WARNING"}
    scenarios: dict[str, Any] = {}
    counter = iter(range(10**6))

    def fresh_cache() -> str:
        path = root / f"cache-{next(counter)}"
        shutil.rmtree(path, ignore_errors=True)
        return str(path)

    def add(name: str, fn: Any) -> None:
        scenarios[name] = fn

    add("minimal script", lambda: probe("minimal", request, base_env()))
    lam = {**local, "AWS_LAMBDA_FUNCTION_NAME": "bench"}
    add(
        "Lambda handler",
        lambda: probe("lambda", request, base_env(**lam, OVS_CACHE_DIR=fresh_cache())),
    )

    def ov_cache(path: str) -> dict[str, str]:  # OpenVINO's own CACHE_DIR, the old default
        return {"OVS_PLUGIN_CONFIG": json.dumps({"CACHE_DIR": path})}

    add(
        "Lambda, OV CACHE_DIR empty",
        lambda: probe(
            "lambda",
            request,
            base_env(**lam, OVS_CACHE_DIR=fresh_cache(), **ov_cache(fresh_cache())),
        ),
    )
    warm_cache = fresh_cache()
    probe("lambda", request, base_env(**lam, OVS_CACHE_DIR=fresh_cache(), **ov_cache(warm_cache)))
    add(
        "Lambda, OV CACHE_DIR hit",
        lambda: probe(
            "lambda", request, base_env(**lam, OVS_CACHE_DIR=fresh_cache(), **ov_cache(warm_cache))
        ),
    )
    for name, extra in (variants or {}).items():
        add(
            name,
            lambda extra=extra: probe(
                "lambda", request, base_env(**lam, OVS_CACHE_DIR=fresh_cache(), **extra)
            ),
        )
    add(
        "functions-framework (probe)",
        lambda: probe(
            "cloud_run", request, base_env(**local, K_SERVICE="bench", OVS_CACHE_DIR=fresh_cache())
        ),
    )
    add(
        "serve (probe)",
        lambda: probe(
            "serve",
            request,
            base_env(  # serve's THROUGHPUT hint
                **local, OVS_CONCURRENT="1", OVS_CACHE_DIR=fresh_cache()
            ),
        ),
    )
    ff = str(Path(sys.executable).parent / "functions-framework")
    port = free_port()
    ff_cmd = [
        ff,
        "--source",
        str(REPO / "handlers" / "cloud_run.py"),
        "--target",
        "predict",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    socket_on = [sys.executable, str(REPO / "bench" / "ff_control_socket.py"), *ff_cmd[1:]]
    ff_rows = {
        "functions-framework (real)": (ff_cmd, {}),
        **{name: (ff_cmd, extra) for name, extra in (ff_variants or {}).items()},
        "functions-framework, control socket on": (socket_on, {}),
    }
    for name, (cmd, extra) in ff_rows.items():
        add(
            name,
            lambda cmd=cmd, extra=extra: real(
                cmd,
                port,
                http,
                base_env(**local, K_SERVICE="bench", OVS_CACHE_DIR=fresh_cache(), **extra),
                root / "ff.log",
            ),
        )
    floor = [
        str(REPO / "bench" / "ff_floor.py") if part.endswith("cloud_run.py") else part
        for part in ff_cmd
    ]
    add(
        "functions-framework floor",
        lambda: real(
            floor, port, http, base_env(BENCH_MODEL_FILE=str(model_file)), root / "ff-floor.log"
        ),
    )
    add(
        "serve (real)",
        lambda: real(
            [
                sys.executable,
                "-m",
                "handlers.cli",
                "serve",
                "--model_name",
                model,
                "--model_path",
                str(model_dir),
                "--rest_port",
                str(port),
                "--log_level",
                "WARNING",
            ],
            port,
            http,
            base_env(OVS_CACHE_DIR=fresh_cache()),
            root / "serve.log",
        ),
    )
    if with_peer:
        grpc_port, metrics_port = free_port(), free_port()
        repo = peer.write_repository(
            root / "peer-cold",
            {model: model_file},
            port,
            grpc_port,
            metrics_port,
            {"PERFORMANCE_HINT": "LATENCY"},
        )
        as_json = {
            "path": http["path"],
            "headers": {"Content-Type": "application/json"},
            "body": orjson.dumps(
                {
                    "inputs": [
                        {
                            "name": "input",
                            "shape": list(x.shape),
                            "datatype": "FP32",
                            "data": x.reshape(-1).tolist(),
                        }
                    ]
                }
            ),
        }
        add(
            "MLServer (real, JSON)",
            lambda: real(peer.command(repo), port, as_json, base_env(), root / "peer-cold.log"),
        )
    for remote in remotes:
        label, store = remote["label"], remote["store"]
        remote_request = request_file(
            root,
            model,
            model_file,
            x,
            {
                "bucket": remote["bucket"],
                "keys": remote["keys"],
                "download_dir": str(root / f"minimal-download-{store}"),
            },
            f"cold-request-{store}",
        )
        host, on = (
            remote["host"],
            {
                **(lam if remote["host"] == "lambda" else local),
                **remote["env"],
                "OVS_MODEL_PATH": remote["url"],
            },
        )
        add(
            f"minimal script, {label}",
            functools.partial(probe, f"minimal-{store}", remote_request, base_env(**remote["env"])),
        )
        for name, extra in {remote["row"]: {}, **remote["variants"]}.items():
            add(
                name,
                lambda host=host, on=on, extra=extra: probe(
                    host, request, base_env(**{**on, **extra}, OVS_CACHE_DIR=fresh_cache())
                ),
            )
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in scenarios}
    for _ in range(repeat):
        for name, fn in scenarios.items():
            runs[name].append(fn())
    rows = {name: median_of(items) for name, items in runs.items()}
    return {"rows": rows, "runs": runs}


REMOTE_LABELS = ("S3", "Azure Blob", "GCS")


def baseline(rows: dict[str, dict[str, float]], name: str) -> str:
    """The minimal script a scenario is compared with: the S3 one for S3 rows, and so on."""
    for label in REMOTE_LABELS:
        if label in name and f"minimal script, {label}" in rows:
            return f"minimal script, {label}"
    return "minimal script"


def ratio(cold: dict[str, Any], name: str) -> tuple[float, float, float]:
    """A scenario's median total over its minimal script's, and the lowest and highest of its
    total over the minimal script's of the same round (the spread a single run can show)."""
    base = baseline(cold["rows"], name)
    paired = [
        run["total_s"] / ref["total_s"]
        for run, ref in zip(cold["runs"][name], cold["runs"][base], strict=True)
    ]
    return cold["rows"][name]["total_s"] / cold["rows"][base]["total_s"], min(paired), max(paired)


def report(cold: dict[str, Any]) -> list[str]:
    lines = [
        f"{'cold start (median, ms)':32}"
        + "".join(f"{s[:-2]:>9}" for s in STAGES)
        + f"{'vs min':>8}{'paired':>12}{'RSS MB':>8}{'peak':>7}"
    ]
    for name, row in cold["rows"].items():
        median, low, high = ratio(cold, name)
        cells = "".join(f"{1e3 * row[s]:9.0f}" if s in row else f"{'':>9}" for s in STAGES)
        lines.append(
            f"{name:32}{cells}{median:7.2f}x{low:6.2f}-{high:.2f}"
            f"{row['rss_mb']:8.0f}{row['peak_mb']:7.0f}"
        )
    return lines
