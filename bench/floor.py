"""The transport floor: one HTTP round trip of the served request when the server does nothing
for as long as the model computes (it sleeps the raw p50), paired with a bare sleep.

Its p50 ratio is the lowest any HTTP server could reach on this machine for that model. It
is well above the cost of the same round trip without the wait: threads left idle for ~20 ms
wake up slowly on this VM, and a raw InferRequest called back to back never pays that.

    python -m bench.floor PORT SECONDS     # the server (handlers.http_server)
"""

from __future__ import annotations

import sys
import time
from typing import Any

from bench import cases
from bench.common import Row, base_env, free_port, http_ok, paired, process

REPLY = b"\0" * 4096  # about the size of the binary case's reply (1000 FP32 + header)


def measure(http: dict[str, Any], seconds: float, count: int) -> Row:
    port = free_port()
    cmd = [sys.executable, "-m", "bench.floor", str(port), str(seconds)]
    with process(cmd, base_env(), lambda: http_ok(port, "/ready")):
        call = cases.rest(port, http["path"], http["body"], http["headers"])()
        served, raw = paired(call, lambda: time.sleep(seconds), count)
    return {**served, "raw_p50_ms": raw["p50_ms"], "p50_ratio": served["p50_ms"] / raw["p50_ms"],
            "sleep_ms": seconds * 1e3}


def main(argv: list[str]) -> int:
    from core.api import Request, Response
    from handlers import http_server

    port, seconds = int(argv[0]), float(argv[1])

    def handle(request: Request) -> Response:
        if request.method == "POST":
            time.sleep(seconds)
        return Response(200, REPLY, {"content-type": "application/octet-stream"})

    server = http_server.Server(handle, http_server.listen("127.0.0.1", port), threads=4,
                                read_timeout=30.0, max_body=1 << 26)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
