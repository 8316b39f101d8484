"""OVMS's `mean` / `scale` / `precision` model fields (and --mean, OVS_MEAN, ...): the model
computes on (x - mean) / scale, a number or one value per channel, of requests sent in the
precision's first type, all inside the compiled model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest

from core.api import App, make_request
from core.config import Settings, parse_config
from core.errors import ConfigError
from demo import models
from tests.core.helpers import classifier, save_ir, write_config


def _app(config: Path, tmp_path: Path) -> App:
    from core.serving.registry import ModelManager

    settings = Settings(config_path=str(config), cache_dir=str(tmp_path / "cache"))
    return App(ModelManager.start(settings), settings)


def _predict(app: App, name: str, data: np.ndarray) -> tuple[int, Any]:
    body = json.dumps({"instances": data.tolist()}).encode()
    response = app.handle(make_request("POST", f"/v1/models/{name}:predict", body, {}))
    return response.status, json.loads(response.body)


@pytest.fixture
def app(tmp_path: Path) -> App:
    save_ir(models.scaler(2.0, shape=(1, 4)), tmp_path / "scaler" / "1")
    save_ir(classifier(batch=1), tmp_path / "classifier" / "1")
    save_ir(models.two_inputs(), tmp_path / "two" / "1")
    config = write_config(
        tmp_path / "config.json",
        [
            {"name": "scalar", "base_path": str(tmp_path / "scaler"), "mean": 1.5, "scale": 0.5},
            {
                "name": "scalar_text",
                "base_path": str(tmp_path / "scaler"),
                "mean": "1.5",
                "scale": "0.5",
            },
            {
                "name": "per_channel",
                "base_path": str(tmp_path / "classifier"),
                "layout": "NCHW",
                "mean": "[123.675,116.28,103.53]",
                "scale": [58.395, 57.12, 57.375],
            },
            {"name": "two_inputs", "base_path": str(tmp_path / "two"), "mean": 1},
        ],
    )
    return _app(config, tmp_path)


@pytest.mark.parametrize("name", ["scalar", "scalar_text"])
def test_scalar_mean_and_scale(app: App, name: str) -> None:
    data = np.array([[1, 2, 3, 4]], np.float32)
    status, doc = _predict(app, name, data)
    assert status == 200, doc
    assert np.allclose(doc["predictions"], (data - 1.5) / 0.5 * 2)


def test_per_channel_values_match_openvino_on_normalised_input(app: App) -> None:
    data = np.random.default_rng(3).uniform(0, 255, (1, 3, 224, 224)).astype(np.float32)
    status, doc = _predict(app, "per_channel", data)
    assert status == 200, doc
    mean = np.array([123.675, 116.28, 103.53], np.float32).reshape(1, 3, 1, 1)
    scale = np.array([58.395, 57.12, 57.375], np.float32).reshape(1, 3, 1, 1)
    compiled = ov.Core().compile_model(classifier(batch=1), "CPU")
    expected, raw = compiled((data - mean) / scale)[0], compiled(data)[0]
    got = np.asarray(doc["predictions"], np.float32)
    assert np.allclose(got, expected, rtol=1e-2, atol=1e-6)  # preprocessing fused: float order
    assert np.abs(got - expected).max() < 0.1 * np.abs(raw - expected).max()


def test_a_model_with_two_inputs_fails_to_load_with_a_reason(app: App) -> None:
    status = app.manager.models["two_inputs"].versions[1].status
    assert status.error_code == "UNKNOWN"
    assert (
        "precision, mean and scale apply to a model with one input; this one has 2"
        in status.error_message
    )
    assert _predict(app, "scalar", np.ones((1, 4), np.float32))[0] == 200  # others serve


@pytest.mark.parametrize("value", ["[1,x]", "abc", True, [True], {"a": 1}, []])
def test_bad_values_are_config_errors(value: Any) -> None:
    doc = {"model_config_list": [{"config": {"name": "m", "base_path": "/m", "mean": value}}]}
    with pytest.raises(
        ConfigError,
        match=r"model_config_list\[0\]\.config\.mean: expected a "
        "number or a list of numbers",
    ):
        parse_config(json.dumps(doc).encode())


def test_env_and_flag_forms(tmp_path: Path) -> None:
    import subprocess

    from tests.core.helpers import console_script

    save_ir(models.scaler(2.0, shape=(1, 4)), tmp_path / "scaler" / "1")
    settings = Settings.from_env(
        {
            "OVS_MODEL_NAME": "s",
            "OVS_MODEL_PATH": str(tmp_path / "scaler"),
            "OVS_MEAN": "1",
            "OVS_SCALE": "(4, 2)",
        }
    )
    (model,) = settings.server_config().models
    assert (model.mean, model.scale) == (1.0, (4.0, 2.0))  # "(...)": one value per channel
    body = json.dumps({"instances": [[1, 5, 9, 13]]})
    done = subprocess.run(
        [
            console_script(),
            "invoke",
            "POST",
            "/v1/models/s:predict",
            "--data",
            body,
            "--model_name",
            "s",
            "--model_path",
            str(tmp_path / "scaler"),
            "--mean",
            "1",
            "--scale",
            "4",
            "--cache_dir",
            str(tmp_path / "cache"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"predictions": [[0.0, 2.0, 4.0, 6.0]]}


def test_precision_takes_requests_in_another_type(tmp_path: Path) -> None:
    """ "UINT8:FP32": requests send uint8 (metadata says so), the FP32 model gets them converted;
    with mean and scale applied after the conversion, as OVMS orders them."""
    save_ir(models.scaler(2.0, shape=(1, 4)), tmp_path / "scaler" / "1")
    config = write_config(
        tmp_path / "config.json",
        [
            {
                "name": "u8",
                "base_path": str(tmp_path / "scaler"),
                "precision": "UINT8:FP32",
                "mean": 100,
                "scale": 2,
            }
        ],
    )
    app = _app(config, tmp_path)
    response = app.handle(make_request("GET", "/v2/models/u8", b"", {}))
    assert json.loads(response.body)["inputs"][0]["datatype"] == "UINT8"
    status, doc = _predict(app, "u8", np.array([[100, 102, 110, 255]], np.uint8))
    assert status == 200, doc
    assert doc == {"predictions": [[0.0, 2.0, 10.0, 155.0]]}


@pytest.mark.parametrize("value", ["FP32", "UINT8:FP", "U8:F32", 8])
def test_bad_precision_is_a_config_error(value: Any) -> None:
    doc = {"model_config_list": [{"config": {"name": "m", "base_path": "/m", "precision": value}}]}
    with pytest.raises(
        ConfigError,
        match=r"config\.precision: expected <request precision>:"
        r"<model precision> of BF16, FP64",
    ):
        parse_config(json.dumps(doc).encode())
