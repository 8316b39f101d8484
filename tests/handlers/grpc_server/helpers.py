"""A model repository for the gRPC tests and `ov-serverless serve` subprocesses speaking gRPC."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import openvino as ov
from grpc_health.v1 import health_pb2, health_pb2_grpc
from openvino import opset13 as ops
from PIL import Image

from demo import models

MODELS = ("classifier", "two_inputs", "scaler", "slow", "empty")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def slow_model(size: int = 256, rounds: int = 192) -> ov.Model:
    """x [N,size,size] -> tanh(x @ W) `rounds` times -> mean [N]: cost grows with N, for the
    drain and queueing tests (the output stays tiny). 192 rounds: on a CPU with AMX one item
    is ~4x the work of a 48-round model's, so the calls stay long under the tests' batch cap."""
    x = ops.parameter([-1, size, size], np.float32, name="x")
    x.output(0).set_names({"x"})
    weights = ops.constant(
        np.random.default_rng(0).normal(0, 0.05, (size, size)).astype(np.float32)
    )
    y = x
    for _ in range(rounds):
        y = ops.tanh(ops.matmul(y, weights, False, False))
    mean = ops.reduce_mean(y, ops.constant(np.array([1, 2], dtype=np.int64)), False)
    mean.output(0).set_names({"y"})
    return ov.Model([mean], [x], "slow")


def build_repository(root: Path) -> Path:
    """classifier (dynamic batch), two_inputs, scaler v1 (x2) + v2 (x3), slow, empty (no
    version: never available)."""
    models.save(models.classifier(seed=0, batch=None), root / "classifier" / "1")
    models.save(models.two_inputs(), root / "two_inputs" / "1")
    models.save(models.scaler(2.0), root / "scaler" / "1")
    models.save(models.scaler(3.0), root / "scaler" / "2")
    models.save(slow_model(), root / "slow" / "1")
    (root / "empty").mkdir(parents=True, exist_ok=True)
    entries: list[dict[str, Any]] = [
        {"config": {"name": name, "base_path": name}} for name in MODELS
    ]
    entries[MODELS.index("scaler")]["config"]["model_version_policy"] = {"all": {}}
    config = root / "config.json"
    config.write_text(json.dumps({"model_config_list": entries}))
    return config


def direct(xml: Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The same model run with plain OpenVINO, outputs by tensor name."""
    compiled = ov.Core().compile_model(str(xml), "CPU")
    result = compiled.create_infer_request().infer(inputs)
    return {port.get_any_name(): np.array(value) for port, value in result.items()}


def jpeg(width: int, height: int, seed: int = 0) -> bytes:
    """A random-pixel jpeg."""
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def decode_like_ovms(data: bytes) -> np.ndarray:
    """What OVMS does with OpenCV: decode (BGR), float32, INTER_LINEAR to 224x224, NCHW."""
    import cv2

    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    resized = cv2.resize(bgr.astype(np.float32), (224, 224), interpolation=cv2.INTER_LINEAR)
    return np.ascontiguousarray(resized.transpose(2, 0, 1))


@dataclass
class Server:
    """`ov-serverless serve --port P [--rest_port R | 0] ...` on 127.0.0.1, ready-checked."""

    proc: subprocess.Popen[bytes]
    port: int
    rest_port: int
    log: Path

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @classmethod
    def start(cls, config: Path, workdir: Path, *extra: str, rest: bool = True) -> Server:
        port, rest_port = free_port(), (free_port() if rest else 0)
        log = workdir / f"server-{port}.log"
        cmd = [
            sys.executable,
            "-m",
            "handlers.cli",
            "serve",
            "--config_path",
            str(config),
            "--port",
            str(port),
            "--rest_port",
            str(rest_port),
            "--grpc_bind_address",
            "127.0.0.1",
            "--cache_dir",
            str(workdir / "cache"),
            "--log_level",
            "WARNING",
            *extra,
        ]
        with log.open("wb") as sink:
            proc = subprocess.Popen(
                cmd,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        server = cls(proc, port, rest_port, log)
        server.wait_serving()
        return server

    def wait_serving(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        with grpc.insecure_channel(self.target) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"server exited with {self.proc.returncode}:\n"
                        + self.log.read_text()[-3000:]
                    )
                try:
                    reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
                time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"gRPC not serving on {self.target}:\n" + self.log.read_text()[-3000:])

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode
