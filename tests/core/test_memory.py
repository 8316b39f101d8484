"""core.memory: with the serving malloc settings, a request's big buffers are reused instead of
faulted in again from the kernel each time (what made a 600 KB request ~0.5 ms slower)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.emulators import REPO

CHILD = """
import http.client, json, resource, sys, threading, time
from core import memory
from core.api import Response
from handlers import http_server

tuned = sys.argv[1] == "tuned" and memory.keep_freed_memory()

def handle(request):
    time.sleep(0.02)  # the model's time: the gap in which freed memory went back to the kernel
    return Response(200, b"{}")

listener = http_server.listen("127.0.0.1", 0)
server = http_server.Server(handle, listener, threads=4, read_timeout=30, max_body=1 << 26)
threading.Thread(target=server.serve_forever, daemon=True).start()
conn = http.client.HTTPConnection("127.0.0.1", listener.getsockname()[1])
body = bytes(range(256)) * 2352  # 600 KB, the size of a 1x3x224x224 FP32 tensor

def send():
    conn.request("POST", "/v2/models/m/infer", body, {"Content-Type": "application/octet-stream"})
    reply = conn.getresponse()
    reply.read()
    assert reply.status == 200

for _ in range(5):
    send()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(30):
    send()
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 30
print(json.dumps({"tuned": tuned, "faults": faults}))
"""


def _faults(mode: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    result: dict[str, float] = json.loads(out.stdout.splitlines()[-1])
    return result


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_big_request_buffers_are_not_faulted_in_again_per_request() -> None:
    default, tuned = _faults("default"), _faults("tuned")
    assert tuned["tuned"]
    assert default["faults"] > 50, default  # each 600 KB body's pages, fresh from the kernel
    assert tuned["faults"] < 15, tuned
