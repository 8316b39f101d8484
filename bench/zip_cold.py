"""Cold start of the Lambda zip package, unzipped, against the container handler and the minimal
openvino script; and what a SnapStart restore still runs here (the after-restore hooks).

Rows, each a fresh process timed from Popen to the first 200 (median of ROUNDS):
  zip           the unzipped package under the real awslambdaric bootstrap (CPython 3.12 from
                the package's own folder, no bytecode written: /var/task is read-only on Lambda)
  zip, no .pyc  the same without the package's .pyc files: every import compiles its module
  container     the repository's handler under the same bootstrap, from this checkout and venv
                (what the container image runs)
  minimal       import openvino, read + compile the model, one inference, from the package folder
  restore       SnapStart's path in one process: init and before-snapshot hooks run first, then
                the clock starts when the Runtime API answers /restore/next; the row is the
                after-restore hooks plus the first invocation (Lambda's own snapshot restore,
                outside the process, is not in it)

    PYTHONPATH=. .venv/bin/python -m bench.zip_cold [ROUNDS]
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import version
from pathlib import Path
from typing import Any

from bench.common import REPO, save
from demo.models import write_demo_repository
from handlers import package

PREFIX = "/2018-06-01/runtime"
ROWS = ("zip", "zip, no .pyc", "container", "minimal", "restore")
PREDICT = {
    "path": "/v1/models/classifier:predict",
    "method": "POST",
    "body": {"instances": [[[[0.5] * 224] * 224] * 3]},
}
MINIMAL = """
import numpy as np, openvino as ov
core = ov.Core()
model = core.compile_model(core.read_model({xml!r}), "CPU", {{"PERFORMANCE_HINT": "LATENCY"}})
model({{0: np.full((1, 3, 224, 224), 0.5, np.float32)}})
print("ok", flush=True)
"""


class RuntimeApi(ThreadingHTTPServer):
    """The Lambda Runtime API's invocation and restore endpoints, one event per run."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.restore = threading.Event()  # set: /restore/next answers (the restore happens)
        self.restore_asked = threading.Event()
        self.results: queue.Queue[tuple[float, int]] = queue.Queue()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a runtime killed at the end of its run resets its connection: expected


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: RuntimeApi

    def do_GET(self) -> None:  # noqa: N802
        if self.path == PREFIX + "/restore/next":
            self.server.restore_asked.set()
            self.server.restore.wait(120)
            return self._reply(200, b"{}", {})
        self._reply(
            200,
            json.dumps(PREDICT).encode(),
            {
                "Lambda-Runtime-Aws-Request-Id": "bench-1",
                "Lambda-Runtime-Deadline-Ms": str(int((time.time() + 60) * 1000)),
                "Lambda-Runtime-Invoked-Function-Arn": "arn:aws:lambda:us-east-1:1:function:ovs",
            },
        )

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.endswith("/response"):
            self.server.results.put((time.perf_counter(), json.loads(body)["statusCode"]))
        else:
            self.server.results.put((time.perf_counter(), 500))
        self._reply(202, b"{}", {})

    def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for key, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def prepare(work: Path) -> tuple[Path, Path, Path, package.Report]:
    """(task folder, runtime folder, config) from a fresh build of the demo repository."""
    config = write_demo_repository(work / "demo")
    zipped = work / "lambda.zip"
    target = package.Target("x86_64", "3.12")
    report = package.build(zipped, package.Options(target, config_path=config))
    task, runtime = work / "task", work / "runtime"
    with zipfile.ZipFile(zipped) as archive:
        archive.extractall(task)
    wheels = package.download(
        package.resolve([f"awslambdaric=={version('awslambdaric')}"], target),
        target,
        package.default_wheel_cache(target),
    )
    package.install(wheels, target, runtime)
    package.compile_bytecode(runtime, target, "/var/runtime")  # the managed runtime has them
    return task, runtime, config, report


def lambda_env(api: RuntimeApi, path: str, config: Path, cache: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": path,
        "LANG": "C.UTF-8",
        "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{api.server_address[1]}",
        "AWS_LAMBDA_FUNCTION_NAME": "ovs",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "3008",
        "AWS_LAMBDA_FUNCTION_VERSION": "1",
        "_HANDLER": "handlers.aws_lambda.handler",
        "OVS_CONFIG_PATH": str(config),
        "OVS_CACHE_DIR": str(cache),
    }


def cold(
    python: str, cwd: Path, env: dict[str, str], api: RuntimeApi, snapstart: bool = False
) -> dict[str, float]:
    """Popen -> first 200 (or, with snapstart, restore -> first 200) and the hooks' figures."""
    env = env | ({"AWS_LAMBDA_INITIALIZATION_TYPE": "snap-start"} if snapstart else {})
    api.restore.clear()
    api.restore_asked.clear()
    started = time.perf_counter()
    proc = subprocess.Popen(
        [python, "-s", "-m", "awslambdaric", "handlers.aws_lambda.handler"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        if snapstart:
            if not api.restore_asked.wait(120):
                raise RuntimeError("the runtime never asked /restore/next")
            started = time.perf_counter()
            api.restore.set()
        done, status = api.results.get(timeout=120)
    finally:
        proc.kill()
        output = proc.communicate(timeout=10)[0].decode(errors="replace")
    if status != 200:
        raise RuntimeError(f"status {status}:\n{output[-2000:]}")
    row = {"first_200_s": done - started}
    for line in output.splitlines():
        if line.startswith('{"ov_serverless_snapstart"'):
            record = json.loads(line)["ov_serverless_snapstart"]
            row[f"{record['hook']}_s"] = record["duration_s"]
    return row


def minimal(python: str, task: Path, xml: Path) -> dict[str, float]:
    started = time.perf_counter()
    done = subprocess.run(
        [python, "-s", "-c", MINIMAL.format(xml=str(xml))],
        cwd=task,
        env={"PYTHONPATH": str(task), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "ok", done.stderr
    return {"first_200_s": time.perf_counter() - started}


def median(rows: list[dict[str, float]]) -> dict[str, float]:
    return {key: round(statistics.median(r[key] for r in rows), 4) for key in rows[0]}


def main(rounds: int = 5) -> None:
    python = package_python()
    with tempfile.TemporaryDirectory(prefix="zip-cold-") as tmp:
        work = Path(tmp)
        task, runtime, config, report = prepare(work)
        baked = task / package.REPOSITORY_FOLDER / "config.json"
        api = RuntimeApi()
        threading.Thread(target=api.serve_forever, daemon=True).start()
        bare = work / "task-no-pyc"
        shutil.copytree(task, bare, ignore=shutil.ignore_patterns("__pycache__"))
        rows: dict[str, list[dict[str, float]]] = {k: [] for k in ROWS}
        xml = task / package.REPOSITORY_FOLDER / "classifier" / "1" / "model.xml"
        for n in range(rounds):  # interleaved, each round in another order: load hits all alike
            zip_env = lambda_env(api, f"{task}:{runtime}", baked, work / f"c{n}") | {
                "PYTHONDONTWRITEBYTECODE": "1"
            }
            runs: dict[str, Callable[[], dict[str, float]]] = {
                "zip": partial(cold, python, task, zip_env, api),
                "zip, no .pyc": partial(
                    cold, python, bare, zip_env | {"PYTHONPATH": f"{bare}:{runtime}"}, api
                ),
                "container": partial(
                    cold,
                    sys.executable,
                    REPO,
                    lambda_env(api, str(REPO), config, work / f"d{n}"),
                    api,
                ),
                "minimal": partial(minimal, python, task, xml),
                "restore": partial(cold, python, task, zip_env, api, snapstart=True),
            }
            for name in ROWS[n % len(ROWS) :] + ROWS[: n % len(ROWS)]:
                rows[name].append(runs[name]())
        api.shutdown()
    result = {name: median(values) for name, values in rows.items()}
    result["package"] = {
        "unzipped_bytes": report.unzipped_bytes,
        "zipped_bytes": report.zipped_bytes,
        "pruned_items": len(report.pruned),
    }
    path = save("zip_cold", result)
    base = result["minimal"]["first_200_s"]
    for name in ROWS:
        row = result[name]
        extra = "".join(f"  {k} {v * 1000:.1f} ms" for k, v in row.items() if k != "first_200_s")
        print(
            f"{name:13s} {row['first_200_s'] * 1000:8.1f} ms  "
            f"{row['first_200_s'] / base:5.2f}x minimal{extra}"
        )
    print(
        f"package: {report.unzipped_bytes:,} bytes unzipped, {report.zipped_bytes:,} zipped; "
        f"saved {path.relative_to(REPO)}"
    )


def package_python() -> str:
    python = package.find_python("3.12")
    if python is None:
        raise SystemExit("bench.zip_cold needs a CPython 3.12 (the package's version)")
    return python


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
