"""The benchmark suite: warm latency/throughput vs raw OpenVINO and a peer server, cold start
and memory vs a minimal script. One command, a few minutes on a 2-core machine:

    python -m bench.run                  # everything; writes bench/results/bench.json
    python -m bench.run --quick          # fewer calls and cold runs (a smoke test, ~2 min)
    python -m bench.run --no-peer --no-cold --models resnet50

Models (built here, deterministically): `classifier` = demo.models.classifier(batch=1), the
224x224 test classifier (one conv: ~0.3 ms, so the fixed per-call cost dominates); `resnet50`
= bench.models.resnet50_like() (25.5 M parameters, FP16 IR); `demo` = the quick-start demo
model (the same classifier with a dynamic batch dim). One `ov-serverless serve` (REST + gRPC)
serves all three; one MLServer (bench/peer.py, in bench/.peer-venv, created on first run)
serves the same IRs; both are driven by the same client code (bench/cases.py) in this process.
Cold start: bench/cold.py, on resnet50, local disk, S3 (moto), Azure Blob (Azurite) and Cloud
Storage (gcp-storage-emulator), the emulators as tests/emulators.py runs them (`--no-s3`,
`--no-azure`, `--no-gcs` leave them out).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from bench import cases, cold, floor, peer, warm
from bench.common import (
    REPO,
    base_env,
    environ,
    free_port,
    http_ok,
    ov_serve_cmd,
    process,
    save,
    workdir,
)
from bench.models import resnet50_like
from demo.models import classifier

MODELS = ("classifier", "resnet50", "demo")


def build_models(root: Path, names: tuple[str, ...]) -> dict[str, Path]:
    """IRs under root/repo/<name>/1/model.xml and the OVMS config.json serving them."""
    builders = {
        "classifier": lambda: classifier(seed=0, batch=1),
        "resnet50": lambda: resnet50_like(seed=0, batch=1),
        "demo": lambda: classifier(seed=0, batch=None),
    }
    files = {}
    for name in names:
        folder = root / "repo" / name / "1"
        folder.mkdir(parents=True, exist_ok=True)
        ov.save_model(
            builders[name](), folder / "model.xml", compress_to_fp16=name == "resnet50"
        )  # a deployed IR is usually FP16
        files[name] = folder / "model.xml"
    write_config(root / "repo" / "config.json", names)
    return files


STARTED = time.perf_counter()  # the suite's clock, for progress lines and wall_s


def write_config(path: Path, names: Iterable[str], **options: object) -> Path:
    """An OVMS config.json serving each model from the folder of its name, with `options`."""
    entries = [{"config": {"name": n, "base_path": n, **options}} for n in names]
    path.write_text(json.dumps({"model_config_list": entries}, indent=1) + "\n")
    return path


def counts(name: str, quick: bool) -> tuple[int, int]:
    """(calls for 1 client, calls per client for N clients)."""
    big = name == "resnet50"
    if quick:
        return (20, 5) if big else (60, 15)
    return (60, 15) if big else (200, 50)


def machine() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    return {
        "date": datetime.date.today().isoformat(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(memory, 1),
        "python": platform.python_version(),
        "openvino": ov.__version__.split("-")[0],
        "isa": ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"),
    }


def run_warm(
    root: Path, files: dict[str, Path], inputs: dict[str, cases.Payload], args: argparse.Namespace
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, xml in files.items():
        count, per_client = counts(name, args.quick)
        results[name] = {
            "name": name,
            "servers": {},
            "raw": warm.raw_baselines(
                name, xml, inputs[name].x, count, args.clients, args.clients * per_client
            ),
        }  # as many calls as a served run, once on each side
    config = root / "repo" / "config.json"
    servers: list[tuple[str, str, dict[str, str], Path, tuple[str, ...]]] = [
        # `serve` (concurrent, adaptive): a lone request runs on its LATENCY compile, so the
        # 1-client rows pair with raw LATENCY; N clients compare with the faster raw queue
        ("ov-serverless adaptive", "LATENCY", {}, config, cases.ALL_CASES)
    ]
    if not args.quick:
        servers.append(
            ("ov-serverless", "LATENCY", {"OVS_CONCURRENT": "0"}, config, cases.ALL_CASES)
        )
    if args.ab:  # on the model the targets are set for; the small ones measure the transport
        servers += ab_variants(root, {n: f for n, f in files.items() if n == "resnet50"} or files)
    for label, hint, extra, config_path, wanted in servers:
        rest_port, grpc_port = free_port(), free_port()
        env = base_env(OVS_CACHE_DIR=str(root / f"serve-cache-{label}-{hint}"), **extra)
        if "PYTHONPATH" in extra:
            env["PYTHONPATH"] = f"{extra['PYTHONPATH']}:{REPO}"
        with process(
            ov_serve_cmd(config_path, rest_port, grpc_port),
            env,
            lambda rest_port=rest_port: http_ok(rest_port, "/v2/health/ready"),
            log=root / "serve.log",
        ):
            for name in _served(config_path, files):
                _serve(
                    results[name],
                    label,
                    hint,
                    {
                        **cases.rest_cases(rest_port, inputs[name], wanted),
                        **cases.grpc_cases(grpc_port, inputs[name], wanted),
                    },
                    args,
                )
    if args.peer and peer.ensure_venv():
        http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
        repo = peer.write_repository(
            root / "peer",
            files,
            http_port,
            grpc_port,
            metrics_port,
            {"PERFORMANCE_HINT": "THROUGHPUT"},
        )
        ready = lambda: all(  # noqa: E731
            http_ok(http_port, f"/v2/models/{n}/ready") for n in files
        )
        with process(peer.command(repo), base_env(), ready, log=root / "peer.log"):
            for name in files:
                _serve(
                    results[name],
                    "MLServer",
                    "THROUGHPUT",
                    {
                        **cases.rest_cases(http_port, inputs[name], cases.PEER_CASES),
                        **cases.grpc_cases(grpc_port, inputs[name], cases.PEER_CASES),
                    },
                    args,
                )
    return results


def _served(config: Path, files: dict[str, Path]) -> list[str]:
    return [
        entry["config"]["name"]
        for entry in json.loads(config.read_text())["model_config_list"]
        if entry["config"]["name"] in files
    ]


def ab_variants(
    root: Path, files: dict[str, Path]
) -> list[tuple[str, str, dict[str, str], Path, tuple[str, ...]]]:
    """--ab: the server without one optimisation each, for before/after numbers.
    no simdjson   the JSON cases on the orjson path (simdjson hidden from the server)
    nireq=2       OpenVINO's optimal nireq (= streams) instead of 2 per stream
    batching      with dynamic batching (opt-in; batch_size -1, up to 8 rows, 1 ms window)"""
    shadow = root / "no-simdjson"
    shadow.mkdir(exist_ok=True)
    (shadow / "simdjson.py").write_text('raise ImportError("hidden for the A/B bench")\n')
    config = write_config(root / "repo" / "config-nireq.json", files, nireq=2)
    batched = write_config(
        root / "repo" / "config-batching.json",
        files,
        batch_size=-1,
        dynamic_batching={"max_batch_size": 8, "window_us": 1000},
    )
    json_cases = (cases.REST_TFS_JSON, cases.REST_KSERVE_JSON)
    binary_cases = (cases.REST_KSERVE_BINARY, cases.GRPC_KSERVE)
    return [
        (
            "no simdjson",
            "THROUGHPUT",
            {"PYTHONPATH": str(shadow)},
            write_config(root / "repo" / "config-ab.json", files),
            json_cases,
        ),
        ("nireq=2", "THROUGHPUT", {}, config, binary_cases),
        ("batching", "THROUGHPUT", {}, batched, binary_cases),
    ]


def _serve(
    doc: dict[str, Any],
    label: str,
    hint: str,
    factories: dict[str, cases.Factory],
    args: argparse.Namespace,
) -> None:
    count, per_client = counts(doc["name"], args.quick)
    rows = warm.serve_cases(
        factories,
        count,
        args.clients,
        per_client,
        warm.RAW_CALLS[(doc["name"], hint)],
        warm.RAW_QUEUES[doc["name"]],
    )
    warm.add_ratios(rows, doc["raw"], hint, args.clients)
    doc["servers"][f"{label} {hint[0]}"] = {"server": label, "hint": hint, "cases": rows}
    print(
        f"  warm {doc['name']}: {label} ({hint}) done at {time.perf_counter() - STARTED:.0f} s",
        flush=True,
    )


def version_files(model_dir: Path) -> list[tuple[Path, str]]:
    """Version 1's files, each with its path relative to the version folder."""
    folder = model_dir / "1"
    return [
        (path, path.relative_to(folder).as_posix())
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    ]


def s3_upload(root: Path, model_dir: Path, model: str) -> tuple[Any, dict[str, Any]]:
    """Start moto and upload the model version twice: as is under `<model>/`, and with a
    compiled blob next to it under `<model>-blob/`, exported from a manager serving that
    bucket path (as deploy.md says); (emulator, the s3 dict cold.run takes)."""
    import boto3

    from tests.emulators import MotoS3

    emulator = MotoS3().start()
    client = boto3.client(
        "s3",
        endpoint_url=emulator.endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    client.create_bucket(Bucket="models")
    keys = []
    for path, name in version_files(model_dir):
        keys.append(f"{model}/1/{name}")
        client.upload_file(str(path), "models", keys[-1])
        client.upload_file(str(path), "models", f"{model}-blob/1/{name}")
    with environ(emulator.env):
        blob = make_blob(root / "s3", model, f"s3://models/{model}-blob")
    client.upload_file(str(blob), "models", f"{model}-blob/1/.ov-compiled/{blob.name}")
    return emulator, {
        "label": "S3",
        "store": "s3",
        "host": "lambda",
        "row": "Lambda handler, S3",
        "bucket": "models",
        "keys": keys,
        "url": f"s3://models/{model}",
        "env": emulator.env,
        "variants": {
            "Lambda, S3 through boto3": {"OVS_S3_CLIENT": "boto3"},
            "Lambda, S3 + blob in bucket": {"OVS_MODEL_PATH": f"s3://models/{model}-blob"},
        },
    }


def azure_upload(model_dir: Path, model: str) -> tuple[Any, dict[str, Any]]:
    """Start Azurite and upload the model version; (emulator, the remote dict cold.run takes)
    for the Azure Functions probe reading it with a connection string."""
    from azure.storage.blob import ContainerClient

    from tests.emulators import Azurite

    emulator = Azurite().start()
    container = ContainerClient.from_connection_string(emulator.connection_string, "models")
    container.create_container()
    keys = []
    for path, name in version_files(model_dir):
        keys.append(f"{model}/1/{name}")
        with path.open("rb") as data:
            container.upload_blob(keys[-1], data)
    return emulator, {
        "label": "Azure Blob",
        "store": "az",
        "host": "azure",
        "row": "Azure Functions, Azure Blob",
        "bucket": "models",
        "keys": keys,
        "url": f"az://models/{model}",
        "env": emulator.env,
        "variants": {"Azure Functions, Azure Blob SDK": {"OVS_AZURE_CLIENT": "sdk"}},
    }


def gcs_upload(model_dir: Path, model: str) -> tuple[Any, dict[str, Any]]:
    """Start gcp-storage-emulator and upload the model version; (emulator, the remote dict
    cold.run takes) for the functions-framework probe (a Cloud Run function) reading it."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from tests.emulators import FakeGcs

    emulator = FakeGcs().start()
    with environ(emulator.env):
        client = storage.Client(project="bench", credentials=AnonymousCredentials())
        bucket = client.create_bucket("models")
        keys = []
        for path, name in version_files(model_dir):
            keys.append(f"{model}/1/{name}")
            bucket.blob(keys[-1]).upload_from_filename(str(path))
    return emulator, {
        "label": "GCS",
        "store": "gs",
        "host": "cloud_run",
        "row": "functions-framework, GCS",
        "bucket": "models",
        "keys": keys,
        "url": f"gs://models/{model}",
        "env": {**emulator.env, "K_SERVICE": "bench"},
        "variants": {"functions-framework, GCS SDK": {"OVS_GCS_CLIENT": "sdk"}},
    }


def make_blob(root: Path, model: str, model_path: str) -> Path:
    """The compiled blob a Lambda (LATENCY, one request at a time) would import, made the
    documented way (core.runtime.blobs.export_manager), into root/blobs."""
    from core.config import Settings
    from core.runtime.blobs import export_manager
    from core.serving.registry import ModelManager

    settings = Settings(model_name=model, model_path=model_path, cache_dir=str(root / "blob-cache"))
    (blob,) = export_manager(ModelManager.start(settings), root / "blobs")
    return blob


def run_floor(
    results: dict[str, Any], inputs: dict[str, cases.Payload], args: argparse.Namespace
) -> dict[str, Any]:
    """Per model and transport: the KServe request (REST binary; gRPC raw contents) against a
    server that only sleeps the raw THROUGHPUT p50 (serve's hint), paired with a bare sleep
    (bench/floor.py). -> {"rest": {model: row}, "grpc": {model: row}}."""
    rows: dict[str, Any] = {"rest": {}, "grpc": {}}
    for name, doc in results.items():
        seconds = doc["raw"]["THROUGHPUT"]["1"]["p50_ms"] / 1e3
        count = counts(name, args.quick)[0]
        rows["rest"][name] = floor.measure(
            cases.kserve_binary(name, inputs[name].x), seconds, count
        )
        rows["grpc"][name] = floor.measure_grpc(inputs[name], seconds, count)
        for transport in ("rest", "grpc"):
            row = rows[transport][name]
            print(
                f"transport floor {name} ({transport}): a round trip around a "
                f"{1e3 * seconds:.2f} ms sleep: p50 {row['p50_ms']:.2f} ms, "
                f"{row['p50_ratio']:.2f}x the bare sleep",
                flush=True,
            )
    return rows


def run_cold(
    root: Path, files: dict[str, Path], inputs: dict[str, cases.Payload], args: argparse.Namespace
) -> dict[str, Any]:
    model = "resnet50" if "resnet50" in files else next(iter(files))
    model_dir = files[model].parents[1]
    repeat = 1 if args.quick else args.repeat
    emulators, remotes = [], []
    blob = make_blob(root, model, str(model_dir))
    baked = {"OVS_COMPILED_CACHE": str(blob.parent)}
    variants = {"Lambda, baked blob": baked, "Lambda, openvino with ovc": {"OVS_IMPORT_OVC": "1"}}
    uploads = (
        ([lambda: s3_upload(root, model_dir, model)] if args.s3 else [])
        + ([lambda: azure_upload(model_dir, model)] if args.azure else [])
        + ([lambda: gcs_upload(model_dir, model)] if args.gcs else [])
    )
    try:
        for upload in uploads:
            emulator, remote = upload()
            emulators.append(emulator)
            remotes.append(remote)
        return {
            "model": model,
            **cold.run(
                root / "cold",
                model,
                model_dir,
                files[model],
                inputs[model].x,
                repeat,
                remotes,
                args.peer and peer.ensure_venv(),
                variants,
                {"functions-framework, baked blob": baked},
            ),
        }
    finally:
        for emulator in emulators:
            emulator.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5, help="cold-start runs per scenario")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-peer", dest="peer", action="store_false")
    parser.add_argument("--no-cold", dest="cold", action="store_false")
    parser.add_argument("--no-warm", dest="warm", action="store_false")
    parser.add_argument("--no-s3", dest="s3", action="store_false")
    parser.add_argument("--no-azure", dest="azure", action="store_false")
    parser.add_argument("--no-gcs", dest="gcs", action="store_false")
    parser.add_argument(
        "--ab", action="store_true", help="also serve without each optimisation (before/after rows)"
    )
    parser.add_argument("--out", default="bench")
    args = parser.parse_args(argv)
    if args.cold and args.azure:  # fail now, not after the warm part's minutes
        from tests.emulators import EmulatorError, azurite_binary

        try:
            azurite_binary()
        except EmulatorError as exc:
            parser.error(f"{exc}; or pass --no-azure")
    root = workdir()
    (root / "cold").mkdir()
    files = build_models(root, tuple(args.models))
    jpeg = cases.make_jpeg()
    rng = np.random.default_rng(0)
    inputs = {
        name: cases.Payload(name, rng.random((1, 3, 224, 224), dtype=np.float32), jpeg)
        for name in files
    }
    doc: dict[str, Any] = {
        "machine": machine(),
        "clients": args.clients,
        "quick": args.quick,
        "argv": list(argv or sys.argv[1:]),
    }
    print(f"bench in {root}", flush=True)
    if args.warm:
        doc["warm"] = run_warm(root, files, inputs, args)
        print("\n".join(warm.table(doc["warm"], args.clients)), flush=True)
        doc["floor"] = run_floor(doc["warm"], inputs, args)
    if args.cold:
        doc["cold"] = run_cold(root, files, inputs, args)
        print(f"\ncold start, {doc['cold']['model']}:")
        print("\n".join(cold.report(doc["cold"])), flush=True)
    doc["wall_s"] = time.perf_counter() - STARTED
    path = save(args.out, doc)
    print(f"\n{path} ({doc['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
