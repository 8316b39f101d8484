"""Helpers for the reliability suites: the repository, hand-made hostile payloads, process RSS
from /proc, and /metrics parsing."""

from __future__ import annotations

import re
import struct
import time
import zlib
from pathlib import Path

import numpy as np
import requests

from demo import models
from tests.core.helpers import classifier_nhwc, free_port, save_ir, write_config
from tests.handlers.grpc_server.helpers import slow_model

__all__ = [
    "LIMIT_ENV",
    "build_repository",
    "free_port",
    "png_declaring",
    "rss_bytes",
    "scrape",
    "metric_value",
    "SCALER_X",
    "wait_for",
    "zeros_png",
]

LIMIT_ENV = {
    "OVS_MAX_TENSOR_ELEMENTS": "1000000",
    "OVS_MAX_TENSOR_BYTES": "2000000",
    "OVS_MAX_IMAGE_PIXELS": "1000000",
}
SCALER_X = [[1.0, 2.0, 3.0, 4.0]]


def build_repository(root: Path) -> Path:
    save_ir(models.scaler(3.0), root / "scaler" / "1")
    save_ir(classifier_nhwc(batch=None), root / "classifier_nhwc" / "1")
    save_ir(slow_model(), root / "slow" / "1")
    write_config(
        root / "config.json",
        [{"name": name, "base_path": name} for name in ("scaler", "classifier_nhwc", "slow")],
    )
    return root


def png_declaring(width: int, height: int) -> bytes:
    """A valid PNG signature + IHDR claiming width x height RGB, then a tiny IDAT: what a
    decompression bomb looks like to a decoder that trusts the header."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0" * 64))
        + chunk(b"IEND", b"")
    )


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def scrape(base_url: str) -> str:
    response = requests.get(base_url + "/metrics", timeout=10)
    assert response.status_code == 200, response.text
    return response.text


_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metric_value(text: str, metric: str, /, **labels: str) -> float:
    """Sum of the samples called exactly `metric` whose labels include `labels` (0 if none)."""
    total = 0.0
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or match["name"] != metric:
            continue
        got = dict(_LABEL.findall(match["labels"] or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(match["value"])
    return total


def wait_for(condition: object, timeout: float = 10.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(interval)
    return False


def zeros_png(height: int, width: int) -> bytes:
    from tests.core.helpers import encode_image

    return encode_image(np.zeros((height, width, 3), np.uint8))
