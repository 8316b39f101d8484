"""OCR pipeline overhead: the served pipeline vs the same steps run by hand in-process.

    python -m bench.ocr [--rounds 15] [--cold 3]

Warm, per image (a 640x480 jpeg photo-like background with 5 text lines), median of
alternating rounds:
  hand     Pillow decode (BGR) -> text_detect -> boxes node -> text_recognise per crop ->
           decode node, with openvino and the node code directly
  app      the same jpeg as a TFS {"b64": ...} request through core.api.App (what every host
           runs: JSON, base64, validation, pipeline, custom nodes, JSON answer)
  serve    the same request over HTTP to a real `ov-serverless serve`
Cold, fresh processes, median of --cold runs, each with an empty compiled-model cache:
  lambda   import handlers.aws_lambda + the first Function URL event -> its 200
  script   import openvino, compile both models, read the image by hand
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from bench.common import REPO, base_env, free_port
from examples.ocr.build import build

LINES = (
    "Quarterly report 2024",
    "Revenue grew by 12.5%",
    "OpenVINO Model Server",
    "Serverless inference",
    "Contact: ocr@example.com",
)


def photo() -> bytes:
    """640x480: a lit, noisy backdrop (as a phone photo of a page) with 5 dark text lines."""
    rng = np.random.default_rng(7)
    y, x = np.mgrid[0:480, 0:640]
    light = 200 + 40 * np.sin(x / 170.0) * np.cos(y / 130.0)
    base = np.stack([light, light * 0.97, light * 0.9], axis=-1) + rng.normal(0, 6, (480, 640, 1))
    image = Image.fromarray(base.clip(0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=34)
    for row, line in enumerate(LINES):
        draw.text((30, 30 + row * 88), line, fill=(35, 30, 45), font=font)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=88)
    return buffer.getvalue()


def by_hand(root: Path) -> Callable[[bytes], list[str]]:
    import openvino as ov

    sys.path.insert(0, str(root / "nodes"))
    import boxes_node
    import decode_node

    core = ov.Core()
    detect = core.compile_model(str(root / "text_detect/1/model.xml"), "CPU")
    recognise = core.compile_model(str(root / "text_recognise/1/model.xml"), "CPU")
    settings = boxes_node.initialize({})
    charset = decode_node.initialize({"charset_model": str(root / "text_recognise/1/model.xml")})

    def read(data: bytes) -> list[str]:
        with Image.open(io.BytesIO(data)) as image:
            pixels = np.ascontiguousarray(np.asarray(image.convert("RGB"))[:, :, ::-1][None])
        found = boxes_node.execute(
            {"image": pixels, "probabilities": detect(pixels)[0]}, {}, settings
        )
        characters = np.stack([recognise(crop)[0] for crop in found["crops"]])
        done = decode_node.execute(
            {"probabilities": characters, "boxes": found["boxes"]}, {}, charset
        )
        return [str(t) for t in done["texts"]]

    return read


def in_app(root: Path, cache: Path) -> Callable[[bytes], list[str]]:
    from core.api import App, make_request
    from core.config import Settings
    from core.serving.registry import ModelManager

    settings = Settings(config_path=str(root / "config.json"), cache_dir=str(cache))
    app = App(ModelManager.start(settings), settings)

    def read(data: bytes) -> list[str]:
        body = json.dumps({"inputs": {"image": [{"b64": base64.b64encode(data).decode()}]}})
        reply = app.handle(make_request("POST", "/v1/models/ocr:predict", body.encode(), {}))
        assert reply.status == 200, reply.body[:300]
        return list(json.loads(reply.body)["outputs"]["texts"])

    return read


def over_http(base: str) -> Callable[[bytes], list[str]]:
    import requests

    session = requests.Session()

    def read(data: bytes) -> list[str]:
        body = json.dumps({"inputs": {"image": [{"b64": base64.b64encode(data).decode()}]}})
        reply = session.post(base + "/v1/models/ocr:predict", data=body, timeout=120)
        assert reply.status_code == 200, reply.text[:300]
        return list(reply.json()["outputs"]["texts"])

    return read


def start_serve(root: Path, cache: Path) -> tuple[subprocess.Popen[bytes], str]:
    import requests

    port = free_port()
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "ov-serverless"),
            "serve",
            "--rest_port",
            str(port),
            "--config_path",
            str(root / "config.json"),
            "--cache_dir",
            str(cache),
            "--log_level",
            "WARNING",
        ],
        env=base_env(),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if requests.get(base + "/v2/health/ready", timeout=30).status_code == 200:
                return proc, base
        except requests.RequestException:
            time.sleep(0.2)
    proc.kill()
    raise TimeoutError("serve did not get ready")


def warm(
    readers: dict[str, Callable[[bytes], list[str]]], data: bytes, rounds: int
) -> dict[str, tuple[float, float]]:
    """(median, fastest) seconds per reader; the fastest is the least disturbed by other
    load on a shared machine."""
    for read in readers.values():  # warm up, and all must read the same
        assert read(data) == readers["hand"](data)
    times: dict[str, list[float]] = {name: [] for name in readers}
    names = list(readers)
    for round_ in range(rounds):
        shift = round_ % len(names)  # each reader goes first as often: no order bias
        for name in names[shift:] + names[:shift]:
            started = time.perf_counter()
            readers[name](data)
            times[name].append(time.perf_counter() - started)
    return {name: (statistics.median(values), min(values)) for name, values in times.items()}


_LAMBDA = """
import base64, json, sys, time
started = time.perf_counter()
import handlers.aws_lambda as aws
event = json.loads(open(sys.argv[1]).read())
reply = aws.handler(event, None)
assert reply["statusCode"] == 200, reply
print(time.perf_counter() - started)
"""

_SCRIPT = """
import sys, time
started = time.perf_counter()
sys.path.insert(0, sys.argv[1] + "/nodes")
from bench.ocr import by_hand
read = by_hand(__import__("pathlib").Path(sys.argv[1]))
assert read(open(sys.argv[2], "rb").read())
print(time.perf_counter() - started)
"""


def cold(root: Path, data: bytes, runs: int, work: Path) -> dict[str, float]:
    image = work / "photo.jpg"
    image.write_bytes(data)
    event: dict[str, Any] = json.loads(
        (REPO / "tests/events/powertools/lambdaFunctionUrlEvent.json").read_text()
    )
    body = json.dumps({"inputs": {"image": [{"b64": base64.b64encode(data).decode()}]}})
    event["rawPath"] = event["requestContext"]["http"]["path"] = "/v1/models/ocr:predict"
    event["requestContext"]["http"]["method"] = "POST"
    event.update(body=base64.b64encode(body.encode()).decode(), isBase64Encoded=True)
    (work / "event.json").write_text(json.dumps(event))
    times: dict[str, list[float]] = {"lambda": [], "script": []}
    for run in range(runs):
        env = base_env(
            OVS_CONFIG_PATH=str(root / "config.json"), OVS_CACHE_DIR=str(work / f"cache-{run}")
        )
        for name, code, args in (
            ("lambda", _LAMBDA, [str(work / "event.json")]),
            ("script", _SCRIPT, [str(root), str(image)]),
        ):
            started = time.perf_counter()
            subprocess.run(
                [sys.executable, "-c", code, *args],
                env=env,
                cwd=REPO,
                check=True,
                capture_output=True,
                timeout=300,
            )
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--cold", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ocr-") as tmp:
        work = Path(tmp)
        root = work / "repo"
        build(root)
        data = photo()
        proc, base = start_serve(root, work / "serve-cache")
        try:
            readers = {
                "hand": by_hand(root),
                "app": in_app(root, work / "app-cache"),
                "serve": over_http(base),
            }
            print("texts:", readers["hand"](data))
            warm_s = warm(readers, data, args.rounds)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        hand_median, hand_best = warm_s["hand"]
        for name, (median, best) in warm_s.items():
            print(
                f"warm {name:6s} median {median * 1000:7.1f} ms {median / hand_median:.3f}x "
                f"hand; fastest {best * 1000:7.1f} ms {best / hand_best:.3f}x hand"
            )
        if args.cold:
            cold_s = cold(root, data, args.cold, work)
            for name, seconds in cold_s.items():
                print(f"cold {name:6s} {seconds:8.2f} s   {seconds / cold_s['script']:.3f}x script")


if __name__ == "__main__":
    main()
