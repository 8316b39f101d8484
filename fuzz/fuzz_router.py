"""atheris fuzz target for the REST router (core.api.App.handle) with real models: a scaler
(x * 3, FP32 [-1,4]) and a tiny NHWC image model (FP32 [-1,8,8,3]) for the jpeg/png codec.

    pip install atheris
    python fuzz/fuzz_router.py -max_total_time=60 -dict=fuzz/router.dict /tmp/router-corpus

libFuzzer flags pass through. An empty corpus folder given on the command line is first filled
with SEEDS (valid TFS row/column, KServe JSON and binary, b64 images), so mutations start from
requests that reach the codecs and the model instead of dying in the JSON parser.

Input layout: byte 0 = method (low 3 bits) | 0x40 content-type header | 0x80
inference-header-content-length header; byte 1 = route; then a path suffix up to b"\\n"; then
one line per header flagged; the rest is the body. A finding is: an exception escaping
App.handle, a 5xx answer other than 503 (App.handle turns an unhandled bug into 500), or an
error body that is not `{"error": str}`. Not part of the default pytest run;
tests/reliability/test_fuzz_smoke.py replays SEEDS through `one_input` without atheris.
"""

from __future__ import annotations

import base64
import io
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "")
PATHS = (
    "/v1/models/scaler:predict",
    "/v1/models/scaler",
    "/v1/models/scaler/metadata",
    "/v1/models/scaler/versions/1:predict",
    "/v2/models/scaler/infer",
    "/v2/models/scaler",
    "/v2/models/scaler/ready",
    "/v2/health/ready",
    "/v1/config",
    "/metrics",
    "/v2",
    "",
    "/v1/models/img:predict",
    "/v2/models/img/infer",
    "/v1/models/",
    "/v2/models/",
)
CONTENT_TYPE, HEADER_LENGTH = 0x40, 0x80
_app: Any = None


def app() -> Any:
    global _app
    if _app is None:
        import numpy as np
        import openvino as ov
        from openvino import opset13 as ops

        from core.api import App
        from core.config import Settings
        from core.serving.registry import ModelManager
        from demo import models

        root = Path(tempfile.mkdtemp(prefix="fuzz-router-"))
        models.save(models.scaler(3.0), root / "scaler" / "1", "model")
        image = ops.parameter([-1, 8, 8, 3], np.float32, name="img")
        image.output(0).set_names({"img"})
        out = ops.reduce_mean(image, ops.constant(np.array([1, 2], np.int64)), False)
        out.output(0).set_names({"mean"})
        models.save(ov.Model([out], [image], "img"), root / "img" / "1", "model")
        config = root / "config.json"
        config.write_text(
            json.dumps(
                {
                    "model_config_list": [
                        {"config": {"name": name, "base_path": str(root / name)}}
                        for name in ("scaler", "img")
                    ]
                }
            )
        )
        settings = Settings(
            config_path=str(config), cache_dir=str(root / "cache"), max_request_bytes=1 << 16
        )
        _app = App(ModelManager.start(settings), settings)
    return _app


def encode(
    method: str,
    route: str,
    body: bytes = b"",
    suffix: str = "",
    content_type: str | None = None,
    header_length: int | None = None,
) -> bytes:
    """The fuzz input that `one_input` decodes back into this request."""
    flags = METHODS.index(method)
    lines = [suffix.encode()]
    if content_type is not None:
        flags |= CONTENT_TYPE
        lines.append(content_type.encode())
    if header_length is not None:
        flags |= HEADER_LENGTH
        lines.append(str(header_length).encode())
    return bytes([flags, PATHS.index(route)]) + b"\n".join(lines) + b"\n" + body


def decode(data: bytes) -> Any:
    """The core.api.Request a fuzz input stands for (see the module docstring)."""
    from core.api import make_request

    flags = data[0] if data else 0
    route = data[1] if len(data) > 1 else 0
    rest = data[2:]
    method = METHODS[flags & 0x07]
    suffix, _, rest = rest.partition(b"\n")
    path = PATHS[route % len(PATHS)] + suffix.decode("utf-8", "replace")
    headers: dict[str, str] = {}
    for flag, name in (
        (CONTENT_TYPE, "content-type"),
        (HEADER_LENGTH, "inference-header-content-length"),
    ):
        if flags & flag:
            value, _, rest = rest.partition(b"\n")
            headers[name] = value.decode("latin-1")
    return make_request(method, path, rest, headers)


def answer(data: bytes) -> Any:
    """Handle one input; raise on a finding, else return the Response."""
    request = decode(data)
    response = app().handle(request)
    if response.status >= 500 and response.status != 503:
        raise AssertionError(
            f"{response.status} for {request.method} {request.path[:80]!r}: {response.body!r}"
        )
    if response.status >= 400 and response.body:
        doc = json.loads(response.body)
        assert isinstance(doc, dict) and set(doc) == {"error"} and isinstance(doc["error"], str)
    return response


def one_input(data: bytes) -> None:
    answer(data)


def _png(height: int = 8, width: int = 8) -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (10, 200, 30)).save(buffer, "PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def seeds() -> list[bytes]:
    x = [[1.0, 2.0, 3.0, 4.0]]
    kserve = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": x[0]}]}
    binary_header = json.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "shape": [1, 4],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 16},
                }
            ],
            "outputs": [{"name": "y", "parameters": {"binary_data": True}}],
        }
    ).encode()
    image = json.dumps({"instances": [{"b64": _png()}]}).encode()
    png = base64.b64decode(_png())
    image_header = json.dumps(
        {
            "inputs": [
                {
                    "name": "img",
                    "shape": [1],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(png) + 4},
                }
            ]
        }
    ).encode()
    return [
        encode("POST", PATHS[0], json.dumps({"instances": x}).encode()),
        encode("POST", PATHS[0], json.dumps({"inputs": {"x": x}}).encode()),
        encode("POST", PATHS[0], json.dumps({"signature_name": "", "inputs": x}).encode()),
        encode("POST", PATHS[0], json.dumps({"instances": [{"x": x[0]}]}).encode()),
        encode("POST", PATHS[3], json.dumps({"instances": x * 3}).encode()),
        encode("POST", PATHS[4], json.dumps(kserve).encode()),
        encode(
            "POST",
            PATHS[4],
            json.dumps(
                {
                    **kserve,
                    "id": "1",
                    "outputs": [{"name": "y", "parameters": {"binary_data": True}}],
                }
            ).encode(),
        ),
        encode(
            "POST",
            PATHS[4],
            binary_header + b"\0\0\x80?" * 4,
            content_type="application/octet-stream",
            header_length=len(binary_header),
        ),
        encode("POST", PATHS[12], image),
        encode("POST", PATHS[12], json.dumps({"inputs": {"img": [{"b64": _png(4, 6)}]}}).encode()),
        encode(
            "POST",
            PATHS[13],
            image_header + len(png).to_bytes(4, "little") + png,
            header_length=len(image_header),
        ),
        encode("GET", PATHS[1], suffix="/versions/1"),
        encode("GET", PATHS[5], suffix="/versions/1/ready"),
        encode("GET", PATHS[14], suffix="img/metadata"),
        encode("POST", PATHS[8], suffix="/reload"),
    ]


def _fill_empty_corpus(argv: list[str]) -> None:
    for arg in argv[1:]:
        folder = Path(arg)
        if not arg.startswith("-") and folder.is_dir() and not any(folder.iterdir()):
            for index, seed in enumerate(seeds()):
                (folder / f"seed-{index:02d}").write_bytes(seed)


def main() -> None:
    import logging

    import atheris

    logging.disable(logging.CRITICAL)
    app()
    _fill_empty_corpus(sys.argv)
    atheris.instrument_all()
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
