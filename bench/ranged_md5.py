"""What the in-order MD5 of a big Azure blob (its Content-MD5 check) adds to its download when
the service is slower than a local emulator: one 49 MB blob in Azurite, read by the REST client
through a front that holds each answer to RATE MiB/s per connection, with the check and without
(main's behaviour for a file read in ranges), alternated.

    python -m bench.ranged_md5 [--rate 50 100 0] [--repeat 6]     (rate 0: no limit)
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from core.storage import checksums, download, http_client
from core.storage.azure import rest as azure_rest
from tests.core.storage.helpers import Answer, Front, forward
from tests.emulators import Azurite

SIZE = 49 << 20


class Throttled(Front):
    """Forwards to the emulator on `port`; an answer's body streams at `rate` bytes/s per
    connection, in 256 KiB pieces (as a network delivers it: a client sees it arrive)."""

    PIECE = 256 << 10

    def __init__(self, port: int, rate: float) -> None:
        self.port, self.rate = port, rate
        super().__init__()

    def answer(self, request: Any) -> Answer:
        return forward(self.port, request.path, dict(request.headers))

    def write(self, out: Any, body: bytes) -> None:
        started = time.perf_counter()
        for at in range(0, len(body), self.PIECE):
            out.write(body[at : at + self.PIECE])
            if self.rate:
                due = (at + self.PIECE) / self.rate - (time.perf_counter() - started)
                time.sleep(max(0.0, due))


def blob_md5(response: http_client.Response) -> checksums.Digest | None:
    value = response.getheader("x-ms-blob-content-md5", "")
    return checksums.from_base64("md5", value, "x-ms-blob-content-md5")


def timings(emulator: Azurite, rate: float, repeat: int) -> dict[str, list[float]]:
    front = Throttled(emulator.port, rate * (1 << 20))
    try:
        conn = emulator.connection_string.replace(
            f"BlobEndpoint={emulator.endpoint}/", f"BlobEndpoint=http://{front.host}/"
        )
        backend = azure_rest.AzureRestBackend("bench", azure_rest.from_connection_string(conn))
        (obj,) = list(backend.list_objects("big"))

        def get(headers: dict[str, str], use: Any) -> int:
            return backend._call(obj.key, {}, azure_rest.ranged(headers), "bench", use)

        variants = {"unchecked": download.Ranges(), "Content-MD5": azure_rest.WHOLE_MD5}
        times: dict[str, list[float]] = {name: [] for name in variants}
        for turn in range(repeat):
            for name in list(variants)[:: 1 if turn % 2 == 0 else -1]:
                dest = Path(tempfile.mktemp())
                started = time.perf_counter()
                download.download(obj, dest, "bench", get, digest=blob_md5, ranges=variants[name])
                times[name].append(time.perf_counter() - started)
                dest.unlink()
        return times
    finally:
        front.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rate", type=float, nargs="+", default=[50.0, 100.0, 0.0])
    parser.add_argument("--repeat", type=int, default=6)
    args = parser.parse_args()
    from azure.storage.blob import ContainerClient

    emulator = Azurite()
    emulator.start()
    try:
        container = ContainerClient.from_connection_string(emulator.connection_string, "bench")
        container.create_container()
        container.upload_blob("big", os.urandom(SIZE))
        print(f"load average at the start: {os.getloadavg()}")
        for rate in args.rate:
            times = timings(emulator, rate, args.repeat)
            unchecked, checked = (statistics.median(times[n]) for n in times)
            label = f"{rate:.0f} MiB/s per connection" if rate else "no limit"
            print(
                f"{label}: unchecked {unchecked * 1000:.0f} ms, Content-MD5 checked "
                f"{checked * 1000:.0f} ms ({(checked - unchecked) * 1000:+.0f} ms)"
            )
        print(f"load average at the end: {os.getloadavg()}")
    finally:
        emulator.close()


if __name__ == "__main__":
    main()
