"""Time to fetch one ~25 MB model version from each storage emulator vs a local disk copy.

    python bench/storage_load.py [--mb 25] [--repeat 3]

Starts moto (S3), gcp-storage-emulator and Azurite on 127.0.0.1 (tests/emulators.py), uploads
model.xml + a random model.bin with the real SDKs, then times `Repository.fetch()` into an
empty cache (cold) and again into the filled cache (warm: one listing, no download).
Emulators are local processes: this measures the client + emulator path, not a cloud network.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.storage import open_repository  # noqa: E402
from tests.emulators import EMULATORS  # noqa: E402
from tests.storage.helpers import _FOREIGN_ENV, STORES  # noqa: E402

XML = b'<?xml version="1.0"?>\n<net name="bench" version="11"><layers/><edges/></net>\n'


def timed(fn: object) -> float:
    started = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - started


def bench_local(files: dict[str, bytes], repeat: int) -> tuple[list[float], list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "model", "1")
        src.mkdir(parents=True)
        for name, data in files.items():
            (src / name).write_bytes(data)
        copies = []
        for i in range(repeat):
            copies.append(timed(lambda i=i: shutil.copytree(src, Path(tmp, f"copy{i}"))))
        repo = open_repository(str(src.parent), Path(tmp, "cache"))
        return copies, [timed(lambda: repo.fetch(1)) for _ in range(repeat)]


def bench_remote(scheme: str, files: dict[str, bytes], repeat: int) -> tuple[list[float], ...]:
    emulator = EMULATORS[scheme]().start()
    saved = {name: os.environ.pop(name) for name in _FOREIGN_ENV if name in os.environ}
    os.environ.update(emulator.env)
    try:
        store = STORES[scheme](emulator).create()
        for name, data in files.items():
            store.put(f"model/1/{name}", data)
        cold, warm = [], []
        for _ in range(repeat):
            with tempfile.TemporaryDirectory() as cache:
                repo = open_repository(store.url("model"), Path(cache))
                cold.append(timed(lambda repo=repo: repo.fetch(1)))
                warm.append(timed(lambda repo=repo: repo.fetch(1)))
        return cold, warm
    finally:
        for name in emulator.env:
            os.environ.pop(name, None)
        os.environ.update(saved)
        emulator.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=25.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    files = {"model.xml": XML, "model.bin": os.urandom(int(args.mb * (1 << 20)))}
    size_mb = sum(len(b) for b in files.values()) / (1 << 20)

    rows = [("local copytree", *bench_local(files, args.repeat))]
    for scheme in ("s3", "gs", "az"):
        rows.append(
            (f"{scheme} ({EMULATORS[scheme].name})", *bench_remote(scheme, files, args.repeat))
        )

    print(f"\nfetch of one version: 2 files, {size_mb:.1f} MB, median of {args.repeat}")
    print(f"{'backend':<30} {'cold s':>8} {'MB/s':>8} {'cached s':>9}")
    for name, cold, warm in rows:
        c, w = statistics.median(cold), statistics.median(warm)
        print(f"{name:<30} {c:>8.3f} {size_mb / c:>8.0f} {w:>9.4f}")
    print("(local 'cached' = LocalRepository.fetch, which returns the folder in place)")


if __name__ == "__main__":
    main()
