"""Cloud Run's shutdown: SIGTERM to the Cloud Run image's exact command (functions-framework,
gunicorn) while a request is in flight; the request completes with the right numbers, then the
process exits 0. Runs on 127.0.0.1 with PORT set, as Cloud Run sets it."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import requests

from tests.handlers.conftest import ROOT, Repo, free_port, kserve_binary, server_env
from tests.test_infra import DOCKERFILES, image_config


def _infer(
    base: str, x: np.ndarray, sending: threading.Event | None = None
) -> tuple[int, np.ndarray | None, float]:
    """One KServe binary request; `sending` is set once the body is built, as it goes out."""
    body, headers = kserve_binary(x)
    if sending is not None:
        sending.set()
    started = time.monotonic()
    reply = requests.post(
        f"{base}/v2/models/classifier/infer", data=body, headers=headers, timeout=300
    )
    took = time.monotonic() - started
    if reply.status_code != 200:
        return reply.status_code, None, took
    size = int(reply.headers["Inference-Header-Content-Length"])
    return 200, np.frombuffer(reply.content[size:], dtype=np.float32), took


def _wait_ready(base: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            if requests.get(f"{base}/v2/health/ready", timeout=2).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.3)
    raise AssertionError(log.read_text())


def test_sigterm_lets_the_request_in_flight_finish(
    repo: Repo, reference: Callable[[np.ndarray], np.ndarray], tmp_path: Path
) -> None:
    image = image_config(DOCKERFILES["cloudrun"])
    port = free_port()
    env = server_env(repo, **{k: v for k, v in image.env.items() if k != "PATH"}) | repo.env()
    env |= {
        "PORT": str(port),
        "OVS_CACHE_DIR": str(tmp_path / "cache"),
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
    }
    log = tmp_path / "ff.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(image.argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(base, proc, log)
        batch = 16  # 9.6 MB in: upload, decode and infer take a while on any machine
        x = np.random.default_rng(3).random((batch, 3, 224, 224), dtype=np.float32)
        status, _, took = _infer(base, x)
        assert status == 200
        result: dict[str, Any] = {}

        sending = threading.Event()

        def call() -> None:
            result["done"] = _infer(base, x, sending)
            result["finished"] = time.monotonic()

        worker = threading.Thread(target=call)
        worker.start()
        assert sending.wait(timeout=60)  # its body is built: what follows is the round trip
        time.sleep(took / 3)  # calibrated: the request is in flight
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        worker.join(timeout=300)
        status, got, _ = result["done"]
        assert result["finished"] > signalled, "the request ended before SIGTERM"
        assert proc.wait(timeout=60) == 0, log.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert status == 200
    assert got is not None
    np.testing.assert_allclose(got.reshape(batch, -1), reference(x), rtol=1e-5, atol=1e-6)
