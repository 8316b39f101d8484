"""Shared helpers for the serving-core acceptance tests: model builders that save real IR/ONNX
files, repository/config writers, a direct-OpenVINO reference, and a real `ov-serverless serve`
subprocess driven over HTTP.

Nothing here mocks a part of the product: the server is the installed console script, the
models are compiled by OpenVINO, and the expected numbers come from OpenVINO directly.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import requests

from demo import models

READY_TIMEOUT_S = 60.0
CLASSES = 1000

# -- models ------------------------------------------------------------------------------------


def save_ir(model: ov.Model, folder: Path, name: str = "model") -> Path:
    """Save `model` as IR (.xml + .bin) in `folder` (a version directory)."""
    return models.save(model, folder, name)


def classifier(batch: int | None = 1, seed: int = 0) -> ov.Model:
    return models.classifier(seed=seed, batch=batch, classes=CLASSES)


def classifier_hw_dynamic(seed: int = 0) -> ov.Model:
    """The classifier with any H and W: [1,3,-1,-1] -> [1,1000] (conv and mean don't care)."""
    model = classifier(batch=1, seed=seed)
    model.reshape({"input": ov.PartialShape([1, 3, -1, -1])})
    return model


def classifier_nhwc(batch: int | None = 1, seed: int = 0) -> ov.Model:
    """The same network taking NHWC images natively: [N,224,224,3] -> [N,1000]."""
    from openvino.preprocess import PrePostProcessor

    ppp = PrePostProcessor(classifier(batch=batch, seed=seed))
    ppp.input("input").tensor().set_layout(ov.Layout("NHWC"))
    ppp.input("input").model().set_layout(ov.Layout("NCHW"))
    return ppp.build()


def classifier_weights(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The conv kernel and dense weights demo.models.classifier draws for `seed`."""
    rng = np.random.default_rng(seed)
    kernel = rng.normal(0, 0.1, (16, 3, 3, 3)).astype(np.float32)
    weights = rng.normal(0, 0.5, (16, CLASSES)).astype(np.float32)
    return kernel, weights


def save_onnx_classifier(path: Path, batch: int | None = 1, seed: int = 0) -> Path:
    """conv(stride 2, pad 1) -> relu -> mean(H,W) -> matmul -> softmax, with the IR's weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    kernel, weights = classifier_weights(seed)
    graph = helper.make_graph(
        [
            helper.make_node(
                "Conv",
                ["input", "kernel"],
                ["conv"],
                strides=[2, 2],
                pads=[1, 1, 1, 1],
                dilations=[1, 1],
                kernel_shape=[3, 3],
            ),
            helper.make_node("Relu", ["conv"], ["relu"]),
            helper.make_node("ReduceMean", ["relu"], ["pooled"], axes=[2, 3], keepdims=0),
            helper.make_node("MatMul", ["pooled", "weights"], ["logits"]),
            helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1),
        ],
        "classifier",
        [
            helper.make_tensor_value_info(
                "input", TensorProto.FLOAT, [batch if batch else "N", 3, 224, 224]
            )
        ],
        [
            helper.make_tensor_value_info(
                "probabilities", TensorProto.FLOAT, [batch if batch else "N", CLASSES]
            )
        ],
        initializer=[
            numpy_helper.from_array(kernel, "kernel"),
            numpy_helper.from_array(weights, "weights"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def reference(model: ov.Model | Path, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What OpenVINO itself answers for `inputs`: outputs by tensor name."""
    compiled = ov.Core().compile_model(model if isinstance(model, ov.Model) else str(model), "CPU")
    result = compiled(dict(inputs))
    return {port.get_any_name(): np.asarray(result[port]) for port in compiled.outputs}


def write_config(path: Path, entries: Sequence[Mapping[str, Any]]) -> Path:
    doc = {"model_config_list": [{"config": dict(entry)} for entry in entries]}
    path.write_text(json.dumps(doc, indent=1))
    return path


def image_input(seed: int, batch: int = 1, layout: str = "NCHW") -> np.ndarray:
    rng = np.random.default_rng(seed)
    data = rng.uniform(0, 255, (batch, 3, 224, 224)).astype(np.float32)
    return data.transpose(0, 2, 3, 1).copy() if layout == "NHWC" else data


@dataclass(frozen=True)
class Zoo:
    """The standard repository: what each served name is, as an ov.Model or a file."""

    root: Path
    config: Path
    classifier: ov.Model  # [1,3,224,224] -> [1,1000], NCHW
    classifier_dyn: ov.Model  # [-1,3,224,224]
    classifier_nhwc: ov.Model  # [-1,224,224,3]
    classifier_onnx: Path  # .onnx, [1,3,224,224], same weights as `classifier`
    two_inputs: ov.Model
    scaler: ov.Model  # x * 3


# -- wire helpers ------------------------------------------------------------------------------


def b64(data: bytes) -> dict[str, str]:
    return {"b64": base64.b64encode(data).decode("ascii")}


def bytes_framing(items: Sequence[bytes]) -> bytes:
    """KServe binary BYTES: each element prefixed with its 4-byte little-endian length."""
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def split_binary_response(response: requests.Response) -> tuple[dict[str, Any], bytes]:
    length = int(response.headers["Inference-Header-Content-Length"])
    return json.loads(response.content[:length]), response.content[length:]


def kserve_binary_request(doc: Mapping[str, Any], payload: bytes) -> tuple[bytes, dict[str, str]]:
    header = json.dumps(doc).encode()
    return header + payload, {
        "Inference-Header-Content-Length": str(len(header)),
        "Content-Type": "application/octet-stream",
    }


# -- the server --------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def console_script() -> str:
    script = Path(sys.executable).with_name("ov-serverless")
    return str(script) if script.exists() else "ov-serverless"


class RunningServer:
    """`ov-serverless serve` in a subprocess on 127.0.0.1, ready when /v2/health/ready is 200."""

    def __init__(
        self,
        config_path: Path,
        workdir: Path,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"server-{self.port}.log"
        command = [
            console_script(),
            "serve",
            "--rest_port",
            str(self.port),
            "--rest_bind_address",
            "127.0.0.1",
            "--config_path",
            str(config_path),
            "--shutdown_grace_seconds",
            "2",
            "--cache_dir",
            str(workdir / "cache"),
            *extra_args,
        ]
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("OVS_")}
        full_env.update({"PYTHONUNBUFFERED": "1", **(env or {})})
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=full_env,
            start_new_session=True,
        )
        self.session = requests.Session()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log()}")
            with contextlib.suppress(requests.RequestException):
                if requests.get(self.url + "/v2/health/ready", timeout=2).status_code == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"server not ready after {READY_TIMEOUT_S}s:\n{self.log()}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return self.session.get(self.url + path, timeout=60, **kwargs)

    def post(self, path: str, body: Any = None, **kwargs: Any) -> requests.Response:
        """POST a JSON document (`body`), or raw bytes with `data=`."""
        if body is not None:
            kwargs["data"] = json.dumps(body)
        return self.session.post(self.url + path, timeout=60, **kwargs)

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        return self.session.request(method, self.url + path, timeout=60, **kwargs)

    def stop(self) -> None:
        self.session.close()
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self._log.close()


@contextlib.contextmanager
def running_server(
    config_path: Path,
    workdir: Path,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> Iterator[RunningServer]:
    server = RunningServer(config_path, workdir, extra_args, env)
    try:
        yield server
    finally:
        server.stop()


def error_of(response: requests.Response) -> str:
    """The OVMS error text of a reply (`{"error": "..."}`)."""
    doc = response.json()
    assert set(doc) == {"error"}, doc
    message = doc["error"]
    assert isinstance(message, str)
    return message


def encode_image(pixels: np.ndarray, kind: str = "PNG") -> bytes:
    """An HxWx3 uint8 RGB array as png/jpeg bytes."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buffer, format=kind)
    return buffer.getvalue()
