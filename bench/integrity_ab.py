"""Cold starts from buckets, before and after a change to core/storage (issue 32's integrity
checks): bench/cold.py's probes of the Lambda handler on S3 (moto), the Azure Functions
handler on Azure Blob (Azurite) and the Cloud Run handler on GCS (gcp-storage-emulator), each
run by two checkouts alternated in the same run (A B B A ...), on bench.run's resnet50 IR
(FP16, ~49 MB model.bin: read in ranges).

    python -m bench.integrity_ab --before /tmp/base [--after .] [--repeat 6]

S3 holds the model three times: uploaded by boto3's upload_file (8 MiB parts, as bench/run.py
does; botocore adds a composite CRC32), the same without that checksum (its ETag alone), and
by one put_object. Prints per row the median total and download seconds of each tree,
their spread (min-max) and the after/before ratio, with the load average before and after;
the runs go to bench/results/integrity_ab.json.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bench import cold
from bench.common import REPO, base_env, environ, save
from bench.run import azure_upload, build_models, gcs_upload, version_files


def s3_upload(model_dir: Path, model: str) -> tuple[Any, dict[str, Any]]:
    """moto with the version under `<model>/` (upload_file: in parts, with a composite CRC32),
    `<model>-etag/` (in parts, no checksum) and `<model>-put/` (put_object: a CRC32)."""
    import boto3
    from botocore.config import Config

    from tests.emulators import MotoS3

    emulator = MotoS3().start()
    with environ(emulator.env):
        client = boto3.client("s3", endpoint_url=emulator.endpoint)
        bare = boto3.client(  # no CRC32: the object has its ETag alone
            "s3",
            endpoint_url=emulator.endpoint,
            config=Config(request_checksum_calculation="when_required"),
        )
        client.create_bucket(Bucket="models")
        for path, name in version_files(model_dir):
            client.upload_file(str(path), "models", f"{model}/1/{name}")
            bare.upload_file(str(path), "models", f"{model}-etag/1/{name}")
            body = path.read_bytes()
            client.put_object(Bucket="models", Key=f"{model}-put/1/{name}", Body=body)
    return emulator, {"env": emulator.env, "url": f"s3://models/{model}"}


def scenarios(
    root: Path, model: str, model_file: Path, remotes: dict[str, dict[str, Any]]
) -> dict[str, tuple[str, Path, dict[str, str]]]:
    """Row -> (host, request file, environment without PYTHONPATH)."""
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)
    request = cold.request_file(root, model, model_file, x)
    named = {"OVS_MODEL_NAME": model, "OVS_LOG_LEVEL": "WARNING"}
    s3, az, gs = remotes["s3"], remotes["az"], remotes["gs"]
    lam = {**named, **s3["env"], "AWS_LAMBDA_FUNCTION_NAME": "bench"}
    return {
        "Lambda, S3 (upload_file, 8 MiB parts)": (
            "lambda", request, {**lam, "OVS_MODEL_PATH": s3["url"]}
        ),
        "Lambda, S3 (upload_file, no checksum: ETag)": (
            "lambda", request, {**lam, "OVS_MODEL_PATH": s3["url"] + "-etag"}
        ),
        "Lambda, S3 (one put_object)": (
            "lambda", request, {**lam, "OVS_MODEL_PATH": s3["url"] + "-put"}
        ),
        "Azure Functions, Azure Blob": (
            "azure", request, {**named, **az["env"], "OVS_MODEL_PATH": az["url"]}
        ),
        "functions-framework, GCS": (
            "cloud_run", request, {**named, **gs["env"], "OVS_MODEL_PATH": gs["url"]}
        ),
    }  # fmt: skip


def run(trees: dict[str, Path], root: Path, repeat: int) -> dict[str, Any]:
    files = build_models(root, ("resnet50",))
    model_dir = files["resnet50"].parents[1]
    emulators, remotes = [], {}
    try:
        for store, upload in (
            ("s3", lambda: s3_upload(model_dir, "resnet50")),
            ("az", lambda: azure_upload(model_dir, "resnet50")),
            ("gs", lambda: gcs_upload(model_dir, "resnet50")),
        ):
            emulator, remotes[store] = upload()
            emulators.append(emulator)
        rows = scenarios(root, "resnet50", files["resnet50"], remotes)
        runs: dict[str, dict[str, list[dict[str, float]]]] = {
            row: {tree: [] for tree in trees} for row in rows
        }
        order = list(trees)
        for turn in range(repeat):
            for row, (host, request, env) in rows.items():
                for tree in order if turn % 2 == 0 else order[::-1]:
                    cache = tempfile.mkdtemp(dir=root)
                    on = base_env(**env, OVS_CACHE_DIR=cache, PYTHONPATH=str(trees[tree]))
                    runs[row][tree].append(cold.probe(host, request, on, trees[tree]))
                    shutil.rmtree(cache, ignore_errors=True)
        return runs
    finally:
        for emulator in emulators:
            emulator.close()


def summary(runs: dict[str, Any]) -> list[str]:
    """A markdown table: per row, each tree's median total (min-max), the ratio of the
    medians, and the median of the paired (same turn) differences of total and download."""
    lines = [
        "| row | before: total s (min-max) | after: total s (min-max) | after/before "
        "| paired diff, total ms | download s before / after | paired diff, download ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for row, by_tree in runs.items():
        before, after = by_tree["before"], by_tree["after"]
        cells = []
        for items in (before, after):
            totals = [r["total_s"] for r in items]
            cells.append(f"{statistics.median(totals):.3f} ({min(totals):.3f}-{max(totals):.3f})")
        ratio = _median(after, "total_s") / _median(before, "total_s")
        downloads = f"{_median(before, 'download_s'):.3f} / {_median(after, 'download_s'):.3f}"
        lines.append(
            f"| {row} | {cells[0]} | {cells[1]} | {ratio:.3f} "
            f"| {_paired(before, after, 'total_s'):+.0f} | {downloads} "
            f"| {_paired(before, after, 'download_s'):+.0f} |"
        )
    return lines


def _median(items: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in items)


def _paired(before: list[dict[str, float]], after: list[dict[str, float]], key: str) -> float:
    """The median of after - before over the turns, in ms."""
    return 1000 * statistics.median(a[key] - b[key] for a, b in zip(after, before, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the checkout to compare to")
    parser.add_argument("--after", type=Path, default=REPO)
    parser.add_argument("--repeat", type=int, default=6, help="cold starts per row and tree")
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    for tree in trees.values():  # as bench/cold.py's compile_sources, for both checkouts
        for package in ("core", "handlers", "demo", "protos"):
            compileall.compile_dir(tree / package, quiet=1)
    load = [os.getloadavg()]
    with tempfile.TemporaryDirectory() as tmp:
        runs = run(trees, Path(tmp), args.repeat)
    load.append(os.getloadavg())
    lines = summary(runs)
    first, last = (" ".join(f"{v:.2f}" for v in sample) for sample in load)
    lines.append(f"load average (1, 5, 15 min) at the start: {first}, at the end: {last}")
    print("\n".join(lines))
    path = save(
        "integrity_ab", {"trees": {k: str(v) for k, v in trees.items()}, "runs": runs, "load": load}
    )
    print(f"saved {path}")


if __name__ == "__main__":
    main()
