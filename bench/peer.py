"""The peer server: MLServer (PyPI `mlserver`) with a minimal OpenVINO custom runtime.

MLServer's dependencies (FastAPI, uvicorn, pydantic, ...) pin versions of their own, so it
lives in its own venv, bench/.peer-venv (gitignored), created on first use with the same
openvino and numpy versions as this venv. The runtime below is what a user would write from
MLServer's custom-runtime docs: compile once with the same hint as ov-serverless, borrow an
InferRequest from a pool per call and run it on a thread (OpenVINO releases the GIL), decode
and encode with MLServer's NumpyCodec. `parallel_workers: 0` keeps inference in the server
process (MLServer's default of 1 adds a worker process and an IPC hop per request).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.common import REPO

VENV = REPO / "bench" / ".peer-venv"
PYTHON = VENV / "bin" / "python"
MLSERVER_VERSION = "1.7.1"

RUNTIME = """
import asyncio
import queue

import openvino as ov
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class OpenVINORuntime(MLModel):
    async def load(self) -> bool:
        extra = self.settings.parameters.extra or {}
        compiled = ov.Core().compile_model(self.settings.parameters.uri, "CPU",
                                           extra.get("plugin_config", {}))
        self._pool = queue.Queue()
        for _ in range(int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))):
            self._pool.put(compiled.create_infer_request())
        self._output = compiled.outputs[0].get_any_name()
        return True

    def _infer(self, x):
        request = self._pool.get()
        try:
            return request.infer({0: x}, share_inputs=True)[0].copy()
        finally:
            self._pool.put(request)

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = NumpyCodec.decode_input(payload.inputs[0])
        y = await asyncio.to_thread(self._infer, x)
        return InferenceResponse(model_name=self.name,
                                 outputs=[NumpyCodec.encode_output(self._output, y)])
"""


def ensure_venv() -> bool:
    """Create bench/.peer-venv if missing; False (and a note) when it cannot be made."""
    if PYTHON.exists() and _has_mlserver():
        return True
    import numpy
    import openvino

    ov_version = openvino.__version__.split("-")[0]
    print(
        f"creating {VENV} (mlserver=={MLSERVER_VERSION}, openvino=={ov_version}); first run only",
        flush=True,
    )
    try:
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run(
            [
                str(PYTHON),
                "-m",
                "pip",
                "install",
                "-q",
                f"mlserver=={MLSERVER_VERSION}",
                f"openvino=={ov_version}",
                f"numpy=={numpy.__version__}",
            ],
            check=True,
            timeout=900,
        )
    except (subprocess.SubprocessError, OSError) as exc:
        print(f"peer server unavailable: {exc}", flush=True)
        return False
    return _has_mlserver()


def _has_mlserver() -> bool:
    return (
        subprocess.run([str(PYTHON), "-c", "import mlserver"], capture_output=True).returncode == 0
    )


def write_repository(
    root: Path,
    models: dict[str, Path],
    http_port: int,
    grpc_port: int,
    metrics_port: int,
    plugin_config: dict[str, str],
) -> Path:
    """An MLServer repository folder: settings.json, runtime.py, one folder per model."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "settings.json").write_text(
        json.dumps(
            {
                "http_port": http_port,
                "grpc_port": grpc_port,
                "metrics_port": metrics_port,
                "host": "127.0.0.1",
                "parallel_workers": 0,
                "debug": False,
                "load_models_at_startup": True,
            }
        )
    )
    for name, xml in models.items():
        folder = root / name
        folder.mkdir(exist_ok=True)
        (folder / "runtime.py").write_text(RUNTIME)  # MLServer imports it from the model folder
        (folder / "model-settings.json").write_text(
            json.dumps(
                {
                    "name": name,
                    "implementation": "runtime.OpenVINORuntime",
                    "parameters": {"uri": str(xml), "extra": {"plugin_config": plugin_config}},
                }
            )
        )
    return root


def command(root: Path) -> list[str]:
    return [str(VENV / "bin" / "mlserver"), "start", str(root)]
