"""Limits are a value each App holds: two Apps in one process, with different limits, each
refuse and serve by their own, on every REST path (TFS JSON, KServe JSON, KServe binary) and
for jpeg/png inputs."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from PIL import Image

from core.api import App, make_request
from core.config import Settings
from core.serving.registry import ModelManager
from core.tensors.limits import Limits
from demo.models import save, write_demo_repository

ROWS = 4  # the scaler takes [-1, 4]: 4 rows are 16 elements


@pytest.fixture(scope="module")
def apps(tmp_path_factory: pytest.TempPathFactory) -> tuple[App, App]:
    """(small, large) on one manager: the small one allows 8 elements and 100 pixels; the
    large one, built after it, the defaults."""
    root = tmp_path_factory.mktemp("models")
    config = write_demo_repository(root)
    save(_echo(), root / "echo" / "1")
    entries = json.loads(config.read_text())
    entries["model_config_list"].append({"config": {"name": "echo", "base_path": "echo"}})
    config.write_text(json.dumps(entries))
    settings = Settings(config_path=str(config), cache_dir=str(config.parent / "cache"))
    manager = ModelManager.start(settings)
    small_limits = Limits(max_tensor_elements=8, max_image_pixels=100)
    small = App(manager, replace(settings, limits=small_limits))
    large = App(manager, settings)
    return small, large


def _echo() -> ov.Model:
    """An NHWC u8 image in, its pixels out: 6 elements, within the small app's 8."""
    image = ops.parameter(ov.PartialShape([1, 2, 1, 3]), ov.Type.u8, name="image")
    image.set_layout(ov.Layout("NHWC"))
    pixels = ops.convert(image, ov.Type.f32)
    pixels.output(0).get_tensor().set_names({"pixels"})
    return ov.Model([pixels], [image], "echo")


def _tfs(app: App) -> tuple[int, dict]:
    body = json.dumps({"instances": np.ones((ROWS, 4)).tolist()}).encode()
    reply = app.handle(make_request("POST", "/v1/models/scaler:predict", body))
    return reply.status, json.loads(reply.body)


def _kserve_json(app: App) -> tuple[int, dict]:
    tensor = {"name": "x", "shape": [ROWS, 4], "datatype": "FP32", "data": [1.0] * ROWS * 4}
    body = json.dumps({"inputs": [tensor]}).encode()
    reply = app.handle(make_request("POST", "/v2/models/scaler/infer", body))
    return reply.status, json.loads(reply.body)


def _kserve_binary(app: App) -> tuple[int, dict]:
    tensor = {"name": "x", "shape": [ROWS, 4], "datatype": "FP32"}
    head = json.dumps({"inputs": [tensor]}).encode()
    body = head + np.ones((ROWS, 4), np.float32).tobytes()
    headers = {"Inference-Header-Content-Length": str(len(head))}
    reply = app.handle(make_request("POST", "/v2/models/scaler/infer", body, headers))
    return reply.status, json.loads(reply.body)


@pytest.mark.parametrize("send", [_tfs, _kserve_json, _kserve_binary])
def test_each_app_applies_its_own_limits(
    apps: tuple[App, App], send: Callable[[App], tuple[int, dict]]
) -> None:
    small, large = apps
    status, body = send(small)
    assert status == 400
    assert "declares more than 8 elements (the limit)" in body["error"]
    status, body = send(large)
    assert status == 200, body
    status, body = send(small)  # the large App's requests changed nothing for the small one
    assert status == 400


def _png(size: int) -> str:
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((size, size, 3), np.uint8)).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def test_each_app_applies_its_own_image_limit(apps: tuple[App, App]) -> None:
    small, large = apps
    body = json.dumps({"instances": [{"b64": _png(20)}]}).encode()  # 400 pixels
    request = make_request("POST", "/v1/models/echo:predict", body)
    refused = small.handle(request)
    assert refused.status == 400
    assert "20x20 pixels exceed the limit of 100 pixels" in json.loads(refused.body)["error"]
    assert large.handle(request).status == 200
    assert small.handle(request).status == 400


def test_an_apps_image_limit_leaves_pillows_own_setting_alone(apps: tuple[App, App]) -> None:
    from PIL import Image

    before = Image.MAX_IMAGE_PIXELS
    small, _ = apps
    body = json.dumps({"instances": [{"b64": _png(20)}]}).encode()
    assert small.handle(make_request("POST", "/v1/models/echo:predict", body)).status == 400
    assert before == Image.MAX_IMAGE_PIXELS  # other Pillow users in the process keep theirs
