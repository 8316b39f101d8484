"""target_device on this CPU-only host: names OpenVINO knows pass through; a device the host lacks
fails that version only (OVMS's LOADING / UNKNOWN status, a message naming the device); AUTO
serves on the CPU; MYRIAD and HDDL are refused at config load."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest

from core.api import App, make_request
from core.config import Settings, parse_config
from core.errors import ConfigError
from core.serving.registry import ModelManager
from demo import models
from tests.core.helpers import console_script, save_ir, write_config

SERVING = ["CPU", "AUTO", "AUTO:GPU,CPU", "AUTO:CPU", "MULTI:CPU", "HETERO:CPU", "AUTO:-GPU"]
MISSING = {
    "GPU": "GPU",
    "GPU.1": "GPU.1",
    "NPU": "NPU",
    "HETERO:GPU,CPU": "GPU",
    "MULTI:GPU,CPU": "GPU",
    "AUTO:GPU,NPU": "GPU, NPU",
}


def _name(device: str) -> str:
    return "m_" + "".join(c if c.isalnum() else "_" for c in device)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> App:
    root = tmp_path_factory.mktemp("devices")
    save_ir(models.scaler(2.0, shape=(1, 4)), root / "scaler" / "1")
    config = write_config(
        root / "config.json",
        [
            {"name": _name(device), "base_path": str(root / "scaler"), "target_device": device}
            for device in [*SERVING, *MISSING]
        ],
    )
    settings = Settings(config_path=str(config), cache_dir=str(root / "cache"))
    return App(ModelManager.start(settings), settings)


def call(app: App, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else b""
    response = app.handle(make_request(method, path, data, {}))
    return response.status, json.loads(response.body)


@pytest.mark.parametrize("device", SERVING)
def test_device_serves_on_the_cpu(app: App, device: str) -> None:
    status, doc = call(
        app, "POST", f"/v1/models/{_name(device)}:predict", {"instances": [[1, 2, 3, 4]]}
    )
    assert (status, doc) == (200, {"predictions": [[2.0, 4.0, 6.0, 8.0]]})
    version = app.manager.get(_name(device))
    assert list(version._compiled.get_property("EXECUTION_DEVICES")) == ["CPU"]


@pytest.mark.parametrize(("device", "missing"), MISSING.items())
def test_missing_device_fails_that_version_with_its_name(
    app: App, device: str, missing: str
) -> None:
    status, doc = call(app, "GET", f"/v1/models/{_name(device)}")
    assert status == 200
    (version,) = doc["model_version_status"]
    assert version["state"] == "LOADING"
    assert version["status"]["error_code"] == "UNKNOWN"
    message = version["status"]["error_message"]
    assert f"target_device {device}: {missing} not available on this host" in message
    assert "OpenVINO sees: CPU" in message
    assert "/" not in message.replace(device, "")  # no plugin library path
    status, doc = call(
        app, "POST", f"/v1/models/{_name(device)}:predict", {"instances": [[1, 2, 3, 4]]}
    )
    assert status == 404 and "not loaded yet" in doc["error"]  # OVMS: NOT_FOUND


def test_auto_serves_the_same_numbers_as_openvino(app: App) -> None:
    data = np.arange(4, dtype=np.float32).reshape(1, 4)
    expected = ov.Core().compile_model(models.scaler(2.0, shape=(1, 4)), "CPU")(data)[0]
    status, doc = call(app, "POST", "/v1/models/m_AUTO:predict", {"instances": data.tolist()})
    assert status == 200 and np.array_equal(np.array(doc["predictions"]), expected)


@pytest.mark.parametrize(
    "device", ["MYRIAD", "HDDL", "MULTI:MYRIAD,CPU", "HETERO:HDDL,CPU", "AUTO:MYRIAD"]
)
def test_dropped_devices_are_refused_at_config_load(device: str) -> None:
    doc = {
        "model_config_list": [
            {"config": {"name": "m", "base_path": "/models/m", "target_device": device}}
        ]
    }
    name = "MYRIAD" if "MYRIAD" in device else "HDDL"
    with pytest.raises(
        ConfigError,
        match=rf"target_device: {name} is not supported: OpenVINO "
        rf"dropped the {name} plugin",
    ):
        parse_config(json.dumps(doc).encode())


@pytest.mark.parametrize("device", ["MULTI:", "HETERO:", "AUTO:GPU,,CPU"])
def test_empty_device_lists_are_refused(device: str) -> None:
    doc = {
        "model_config_list": [
            {"config": {"name": "m", "base_path": "/models/m", "target_device": device}}
        ]
    }
    with pytest.raises(ConfigError, match="names no device"):
        parse_config(json.dumps(doc).encode())


def test_myriad_flag_exits_with_the_message(tmp_path: Path) -> None:
    save_ir(models.scaler(2.0, shape=(1, 4)), tmp_path / "scaler" / "1")
    done = subprocess.run(
        [
            console_script(),
            "invoke",
            "GET",
            "/v1/models/scaler",
            "--model_name",
            "scaler",
            "--model_path",
            str(tmp_path / "scaler"),
            "--target_device",
            "MYRIAD",
            "--cache_dir",
            str(tmp_path / "cache"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 64, done.stderr
    assert "MYRIAD is not supported: OpenVINO dropped the MYRIAD plugin" in done.stderr
