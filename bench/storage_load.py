"""Time to fetch, and to load (fetch + read + compile), one ~25 MB model version from each
storage emulator vs from local disk.

    python bench/storage_load.py [--mb 25] [--repeat 3]

Starts moto (S3), gcp-storage-emulator and Azurite on 127.0.0.1 (tests/emulators.py) and uploads
one real IR (y = x @ W, W: f32 random, ~--mb MB) with the real SDKs. Then, per backend:
  fetch   `Repository.fetch()` of a new repository (so: SDK client setup + listing +
          download) into an empty cache (cold), then again into the filled cache (warm)
  load    `ModelManager.start()` into an empty cache dir (no download, no compiled blob):
          download s (core.storage.bucket's "model version ready" log line), read s and compile s
          (ModelVersion.timings), and the whole start.
Emulators are local processes: this measures the client + emulator path, not a cloud network.
Results also go to bench/results/storage_load.json.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from bench.common import environ, save  # noqa: E402
from core.config import Settings  # noqa: E402
from core.serving.registry import ModelManager  # noqa: E402
from core.storage import open_repository  # noqa: E402
from tests.core.storage.helpers import _FOREIGN_ENV, STORES  # noqa: E402
from tests.emulators import EMULATORS  # noqa: E402


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def model_files(mb: float) -> dict[str, bytes]:
    """A real IR whose weights take `mb` MB: y = x @ W, x: f32[1, n], W: f32[n, n]."""
    import openvino as ov
    from openvino import opset13 as ops

    n = int((mb * (1 << 20) / 4) ** 0.5)
    weights = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    x = ops.parameter([1, n], np.float32, name="x")
    y = ops.matmul(x, ops.constant(weights), False, False)
    with tempfile.TemporaryDirectory() as tmp:
        ov.save_model(ov.Model([y], [x], "big"), f"{tmp}/model.xml", compress_to_fp16=False)
        return {name: Path(tmp, name).read_bytes() for name in ("model.xml", "model.bin")}


class DownloadLog(logging.Handler):
    """Keeps the `seconds` of core.storage.bucket's "model version ready" records."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seconds: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "model version ready" and not getattr(record, "cached", True):
            self.seconds.append(float(getattr(record, "seconds", 0.0)))


DOWNLOADS = DownloadLog()


def load_once(url: str) -> dict[str, float]:
    """ModelManager.start on one model into an empty cache dir -> timings in seconds."""
    with tempfile.TemporaryDirectory() as cache:
        DOWNLOADS.seconds.clear()
        settings = Settings(model_name="big", model_path=url, cache_dir=cache)
        started = time.perf_counter()
        manager = ModelManager.start(settings)
        total = time.perf_counter() - started
        version = manager.get("big")
        return {
            "download_s": sum(DOWNLOADS.seconds),
            "read_s": version.timings["read_s"],
            "compile_s": version.timings["compile_s"],
            "start_s": total,
        }


def bench_backend(url: str, repeat: int) -> dict[str, Any]:
    cold, warm = [], []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as cache:
            repo = open_repository(url, Path(cache))
            cold.append(timed(lambda repo=repo: repo.fetch(1)))
            warm.append(timed(lambda repo=repo: repo.fetch(1)))
    loads = [load_once(url) for _ in range(repeat)]
    row: dict[str, Any] = {"fetch_cold_s": statistics.median(cold)}
    row["fetch_warm_s"] = statistics.median(warm)
    for key in loads[0]:
        row[key] = statistics.median(load[key] for load in loads)
    return row


def bench_local(files: dict[str, bytes], repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "model", "1")
        src.mkdir(parents=True)
        for name, data in files.items():
            (src / name).write_bytes(data)
        copies = [
            timed(lambda i=i: shutil.copytree(src, Path(tmp, f"copy{i}"))) for i in range(repeat)
        ]
        row = bench_backend(str(src.parent), repeat)
        row["fetch_cold_s"] = statistics.median(copies)  # a copytree stands in for a download
        return row


def bench_remote(scheme: str, files: dict[str, bytes], repeat: int) -> dict[str, Any]:
    emulator = EMULATORS[scheme]().start()
    try:
        with environ(emulator.env, drop=_FOREIGN_ENV):
            store = STORES[scheme](emulator).create()
            for name, data in files.items():
                store.put(f"model/1/{name}", data)
            return bench_backend(store.url("model"), repeat)
    finally:
        emulator.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mb", type=float, default=25.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    storage_log = logging.getLogger("ov_serverless.storage")
    storage_log.setLevel(logging.INFO)
    storage_log.addHandler(DOWNLOADS)
    files = model_files(args.mb)
    size_mb = sum(len(b) for b in files.values()) / (1 << 20)

    rows = {"local": bench_local(files, args.repeat)}
    for scheme in ("s3", "gs", "az"):
        rows[f"{scheme} ({EMULATORS[scheme].name})"] = bench_remote(scheme, files, args.repeat)

    print(f"\none version: 2 files, {size_mb:.1f} MB, median of {args.repeat}, seconds")
    head = ("fetch", "MB/s", "cached", "download", "read", "compile", "start")
    print(f"{'backend':<28}" + "".join(f"{h:>9}" for h in head))
    for name, r in rows.items():
        cells = (
            r["fetch_cold_s"],
            size_mb / r["fetch_cold_s"],
            r["fetch_warm_s"],
            r["download_s"],
            r["read_s"],
            r["compile_s"],
            r["start_s"],
        )
        print(
            f"{name:<28}"
            + "".join(f"{c:>9.3f}" if i != 1 else f"{c:>9.0f}" for i, c in enumerate(cells))
        )
    print(
        "(local: fetch = copytree, cached = LocalRepository.fetch (in place), download = 0;"
        " start = ModelManager.start into an empty cache dir = download + read + compile + pool)"
    )
    path = save("storage_load", {"size_mb": size_mb, "repeat": args.repeat, "rows": rows})
    print(f"saved {path}")


if __name__ == "__main__":
    main()
