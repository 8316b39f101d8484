"""One cold start, in a fresh interpreter: `python bench/cold_child.py HOST REQUEST_FILE [MODEL]`.

HOST is `minimal` (import openvino, compile_model(path), infer: the floor), `minimal-s3` /
`minimal-az` / `minimal-gs` (the same after downloading the files with boto3 /
azure-storage-blob / google-cloud-storage), `lambda` (import handlers.aws_lambda's handler, i.e. the
Lambda init phase, then handler(event)), `azure` (import
handlers.azure_functions, as the Functions worker indexes it, then one call of its function
with an azure.functions.HttpRequest), `cloud_run` (import functions-framework and
handlers.cloud_run, then one request through functions_framework.create_app's test client) or
`serve` (import what `ov-serverless serve` imports, start the manager, one routed request).
Prints one line, `BENCH {json}`, with wall-clock timestamps (time.time(), so the parent can
count from before the process started) and the stage durations the server measured itself.
"""

from __future__ import annotations

import time

T_MAIN = time.time()

import json  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


_ALIVE: list[Any] = []


class _Downloads(logging.Handler):
    """Sums the `seconds` of core.storage.bucket's downloads (a version's files, a blob, the
    weights a version left in the bucket)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seconds = 0.0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() in (
            "model version ready",
            "compiled blob ready",
            "model weights ready",
        ) and not getattr(record, "cached", True):
            self.seconds += float(getattr(record, "seconds", 0.0))


def _memory() -> dict[str, float]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out["rss_mb" if key == "VmRSS" else "peak_mb"] = int(value.split()[0]) / 1024
    return out


def _model_timings() -> dict[str, float]:
    from core.api import default_app

    manager = default_app().manager
    timings: dict[str, float] = {"config_apply_s": manager.timings.get("config_apply_s", 0.0)}
    for served in manager.models.values():
        for version in served.versions.values():
            for key, value in version.timings.items():
                timings[key] = timings.get(key, 0.0) + value
    return timings


def minimal(request: dict[str, Any], store: str) -> dict[str, Any]:
    import numpy as np
    import openvino as ov

    fetch = {"": None, "s3": _s3_fetcher, "az": _azure_fetcher, "gs": _gcs_fetcher}[store]
    get = fetch and fetch(request["bucket"])  # the SDK's import counts as import
    t_imported = time.time()
    path = request["model_file"]
    download_s = 0.0
    if get is not None:
        folder = Path(request["download_dir"])
        folder.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        for key in request["keys"]:
            get(key, folder / Path(key).name)
        download_s = time.perf_counter() - started
        path = str(folder / Path(path).name)
    core = ov.Core()
    started = time.perf_counter()
    compiled = core.compile_model(path, "CPU", {"PERFORMANCE_HINT": "LATENCY"})
    compile_s = time.perf_counter() - started
    t_ready = time.time()
    x = np.zeros(request["shape"], np.float32)
    compiled.create_infer_request().infer({0: x})
    _ALIVE.append(compiled)  # memory is read after return: keep the model, as a server does
    return {
        "t_imported": t_imported,
        "t_ready": t_ready,
        "t_done": time.time(),
        "download_s": download_s,
        "read_s": 0.0,
        "compile_s": compile_s,
    }


def _s3_fetcher(bucket: str) -> Any:
    import boto3

    client = boto3.client("s3")
    return lambda key, dest: client.download_file(bucket, key, str(dest))


def _azure_fetcher(container: str) -> Any:
    import os

    from azure.storage.blob import ContainerClient

    client = ContainerClient.from_connection_string(
        os.environ["AZURE_STORAGE_CONNECTION_STRING"], container
    )

    def get(key: str, dest: Path) -> None:
        with dest.open("wb") as file:
            client.download_blob(key, max_concurrency=4).readinto(file)

    return get


def _gcs_fetcher(bucket: str) -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    # the emulator takes anonymous requests (on Cloud Run, Client() asks the metadata server)
    client = storage.Client(project="bench", credentials=AnonymousCredentials())
    handle = client.bucket(bucket)
    return lambda key, dest: handle.blob(key).download_to_filename(str(dest))


def azure_host(request: dict[str, Any]) -> dict[str, Any]:
    import azure.functions as func

    import core.api  # noqa: F401  (the modules handlers.azure_functions imports first)

    t_imported = time.time()
    import handlers.azure_functions as handler  # builds the App: the models load here

    t_ready = time.time()
    (function,) = handler.app.get_functions()
    http = request["http"]

    class Context:
        invocation_id = "bench"

    call = func.HttpRequest(
        "POST",
        f"https://bench.azurewebsites.net{http['path']}",
        body=http["body"],
        headers=http["headers"],
        route_params={"path": http["path"][1:]},
    )
    reply = function.get_user_function()(call, Context())
    if reply.status_code != 200:
        raise SystemExit(f"azure: {reply.status_code} {reply.get_body()[:300]!r}")
    return {"t_imported": t_imported, "t_ready": t_ready, "t_done": time.time(), **_model_timings()}


def lambda_host(request: dict[str, Any]) -> dict[str, Any]:
    t_import = time.time()  # as in the other rows, the harness before this counts as import
    from handlers.aws_lambda import handler  # the init phase, as the Lambda bootstrap runs it

    t_ready = time.time()

    class Context:
        aws_request_id = "bench"

    reply = handler(request["event"], Context())
    t_done = time.time()
    if reply["statusCode"] != 200:
        raise SystemExit(f"lambda: {reply['statusCode']} {reply['body'][:300]}")
    cold = handler.cold_start
    return {
        "t_imported": t_import + cold["import_s"],
        "t_ready": t_ready,
        "t_done": t_done,
        "config_s": cold["config_s"],
        **_model_timings(),
    }


def cloud_run(request: dict[str, Any]) -> dict[str, Any]:
    import functions_framework

    import core.api  # the modules handlers.cloud_run imports before building

    t_imported = time.time()
    import handlers.cloud_run  # noqa: F401

    core.api.default_app()  # what gunicorn's worker does right after its fork
    t_ready = time.time()
    source = str(Path(__file__).resolve().parents[1] / "handlers" / "cloud_run.py")
    client = functions_framework.create_app("predict", source).test_client()
    http = request["http"]
    reply = client.post(http["path"], data=http["body"], headers=http["headers"])
    if reply.status_code != 200:
        raise SystemExit(f"cloud_run: {reply.status_code} {reply.data[:300]!r}")
    return {"t_imported": t_imported, "t_ready": t_ready, "t_done": time.time(), **_model_timings()}


def serve(request: dict[str, Any]) -> dict[str, Any]:
    import handlers.cli  # noqa: F401
    import handlers.server  # noqa: F401
    from core import api

    t_imported = time.time()
    app = api.default_app()
    t_ready = time.time()
    http = request["http"]
    response = app.handle(api.make_request("POST", http["path"], http["body"], http["headers"]))
    if response.status != 200:
        raise SystemExit(f"serve: {response.status} {response.body[:200]!r}")
    return {"t_imported": t_imported, "t_ready": t_ready, "t_done": time.time(), **_model_timings()}


def main() -> None:
    host, request_file = sys.argv[1], sys.argv[2]
    request = json.loads(Path(request_file).read_text())
    if "http" in request:
        request["http"]["body"] = bytes.fromhex(request["http"]["body"])
    downloads = _Downloads()
    storage_log = logging.getLogger("ov_serverless.storage")
    storage_log.addHandler(downloads)
    storage_log.setLevel(logging.INFO)
    if host.startswith("minimal"):
        result = minimal(request, store=host.partition("-")[2])
    else:
        hosts = {"lambda": lambda_host, "azure": azure_host, "cloud_run": cloud_run, "serve": serve}
        result = hosts[host](request)
        result["download_s"] = downloads.seconds
    result["t_main"] = T_MAIN
    print("BENCH " + json.dumps({**result, **_memory()}), flush=True)


if __name__ == "__main__":
    main()
