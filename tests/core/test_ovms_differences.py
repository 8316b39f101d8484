"""The rows of the README's "Differences from OVMS" table that no other test pins: if one of
these behaviours changes, the table must change with it."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import orjson
import pytest

from core.api import App, Response, make_request
from core.config import Settings
from core.serving.registry import ModelManager
from demo import models
from handlers import cli
from tests.core.helpers import save_ir, write_config

README = Path(__file__).resolve().parents[2] / "README.md"


def log_model() -> ov.Model:
    """x -> log(x): log(0) = -inf, log(-1) = NaN."""
    x = ops.parameter([1, 4], np.float32, name="x")
    y = ops.log(x)
    y.output(0).get_tensor().set_names({"y"})
    return ov.Model([y], [x], "log")


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> App:
    root = tmp_path_factory.mktemp("differences")
    save_ir(models.scaler(2.0), root / "scaler" / "1")
    save_ir(log_model(), root / "log" / "1")
    config = write_config(
        root / "config.json",
        [{"name": "scaler", "base_path": "scaler"}, {"name": "log", "base_path": "log"}],
    )
    settings = Settings.from_env({}, config_path=str(config), cache_dir=str(root / "cache"))
    return App(ModelManager.start(settings), settings)


def call(app: App, method: str, path: str, body: bytes = b"") -> Response:
    return app.handle(make_request(method, path, body, {}))


def test_the_table_is_in_the_readme() -> None:
    text = README.read_text()
    assert "## Differences from OVMS" in text
    assert re.search(r"^\| case \| OVMS \| ov-serverless \|$", text, re.M)


def test_wrong_method_is_405_and_unknown_url_404(app: App) -> None:
    assert call(app, "GET", "/v1/models/scaler:predict").status == 405
    response = call(app, "GET", "/v9/nothing")
    assert response.status == 404
    assert orjson.loads(response.body) == {"error": "Invalid request URL: /v9/nothing"}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v3/chat/completions"),
        ("GET", "/v3/v1/whatever"),
        ("POST", "/v3/models/scaler/x"),
        ("GET", "/v3"),
    ],
)
def test_unknown_url_under_v3_is_openais_404(app: App, method: str, path: str) -> None:
    """An OpenAI client parses {"error": {...}}: these once came as {"error": "..."}."""
    response = call(app, method, path)
    assert response.status == 404
    assert orjson.loads(response.body) == {
        "error": {
            "message": f"Invalid URL ({method} {path})",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }


def test_duplicate_json_keys_take_the_last_value(app: App) -> None:
    body = b'{"instances": [[1, 1, 1, 1]], "instances": [[1, 2, 3, 4]]}'
    response = call(app, "POST", "/v1/models/scaler:predict", body)
    assert orjson.loads(response.body) == {"predictions": [[2.0, 4.0, 6.0, 8.0]]}


def test_non_finite_outputs_are_tf_serving_literals(app: App) -> None:
    tfs = call(app, "POST", "/v1/models/log:predict", b'{"instances": [[0, -1, 1, 1]]}')
    predictions = json.loads(tfs.body)["predictions"][0]
    assert predictions[0] == -math.inf and math.isnan(predictions[1]) and predictions[2:] == [0, 0]
    kserve = call(
        app,
        "POST",
        "/v2/models/log/infer",
        orjson.dumps(
            {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [0, -1, 1, 1]}]}
        ),
    )
    data = json.loads(kserve.body)["outputs"][0]["data"]
    assert data[0] == -math.inf and math.isnan(data[1]) and data[2:] == [0, 0]


def test_rest_binds_to_localhost_by_default() -> None:
    args = cli._parser().parse_args(["serve"])
    assert args.rest_bind_address == "127.0.0.1"
    assert args.grpc_bind_address == "0.0.0.0"
