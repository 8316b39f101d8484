"""Deep JSON nesting and shapes of many dimensions, on the REST paths a client reaches: each is a
400 in the OVMS error shape, or the right answer where the nesting is harmless, never a 500
(a RecursionError, or numpy's ValueError for more than 64 dimensions, once escaped the codecs)."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest

from core.api import App, make_request
from core.config import Settings
from core.serving.registry import ModelManager
from demo.models import save, scaler
from tests.core.codecs.test_serving_strings import pick_model

TOO_DEEP = "Not valid ndarray detected: more than 32 dimensions"
TOO_MANY_DIMS = "Invalid shape for input {}: 65 dimensions, more than 32"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> App:
    """scaler: x FP32 [-1,4] -> y = 3x; pick: text string [-1,-1], index i32 [-1] -> picked."""
    root = tmp_path_factory.mktemp("nesting")
    save(scaler(3.0), root / "scaler" / "1")
    save(pick_model(), root / "pick" / "1")
    config = {
        "model_config_list": [
            {"config": {"name": name, "base_path": name}} for name in ("scaler", "pick")
        ]
    }
    (root / "config.json").write_text(json.dumps(config))
    settings = Settings(config_path=str(root / "config.json"), cache_dir=str(root / "cache"))
    return App(ModelManager.start(settings), settings)


def _post(app: App, path: str, body: bytes, headers: dict[str, str] | None = None) -> Any:
    reply = app.handle(make_request("POST", path, body, headers))
    return reply.status, json.loads(reply.body)


def _nest(leaf: str, depth: int) -> str:
    return "[" * depth + leaf + "]" * depth


@pytest.mark.parametrize("depth", [33, 70, 900])
@pytest.mark.parametrize("leaf", ['"a"', '{"b64": "YQ=="}'])
def test_tfs_strings_nested_too_deep(app: App, leaf: str, depth: int) -> None:
    body = f'{{"inputs": {{"text": {_nest(leaf, depth)}, "index": [0]}}}}'.encode()
    status, doc = _post(app, "/v1/models/pick:predict", body)
    assert (status, doc) == (400, {"error": f"Could not parse input content. {TOO_DEEP}"})


def test_tfs_ragged_strings_deep_past_the_first_row(app: App) -> None:
    """The first row sets the shape; a later row nested 900 deep is ragged, found without
    recursing into it."""
    body = f'{{"instances": [["a"], {_nest(chr(34) + "b" + chr(34), 900)}]}}'.encode()
    status, doc = _post(app, "/v1/models/scaler:predict", body)
    assert (status, doc) == (
        400,
        {"error": "Could not parse instance content. Not valid ndarray detected"},
    )


def test_tfs_strings_at_most_depth_still_serve(app: App) -> None:
    body = json.dumps({"inputs": {"text": [["a", "b"], ["c", "d"]], "index": [1, 0]}}).encode()
    assert _post(app, "/v1/models/pick:predict", body) == (
        200,
        {"outputs": [["c", "d"], ["a", "b"]]},
    )


def test_kserve_bytes_data_nested_deep_is_read_flat(app: App) -> None:
    """KServe "data" may be nested any way (here as deep as orjson parses); its values
    count against "shape"."""
    body = (
        '{"inputs": [{"name": "text", "shape": [1, 1], "datatype": "BYTES", "data": '
        + _nest('"a"', 1000)
        + '}, {"name": "index", "shape": [1], "datatype": "INT32", "data": [0]}]}'
    ).encode()
    status, doc = _post(app, "/v2/models/pick/infer", body)
    assert status == 200, doc
    assert doc["outputs"][0]["data"] == ["a"]


def _kserve(name: str, datatype: str, data: Any) -> dict[str, Any]:
    return {"name": name, "shape": [1] * 65, "datatype": datatype, "data": data}


@pytest.mark.parametrize(
    ("path", "inputs"),
    [
        ("/v2/models/scaler/infer", [_kserve("x", "FP32", [1.0])]),
        (
            "/v2/models/pick/infer",
            [
                _kserve("text", "BYTES", ["a"]),
                {"name": "index", "shape": [1], "datatype": "INT32", "data": [0]},
            ],
        ),
    ],
)
def test_kserve_json_shape_of_too_many_dimensions(
    app: App, path: str, inputs: list[dict[str, Any]]
) -> None:
    status, doc = _post(app, path, json.dumps({"inputs": inputs}).encode())
    assert (status, doc) == (400, {"error": TOO_MANY_DIMS.format(inputs[0]["name"])})


def test_kserve_binary_shape_of_too_many_dimensions(app: App) -> None:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "shape": [1] * 65,
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 4},
                }
            ]
        }
    ).encode()
    body = header + struct.pack("<f", 1.0)
    headers = {"inference-header-content-length": str(len(header))}
    status, doc = _post(app, "/v2/models/scaler/infer", body, headers)
    assert (status, doc) == (400, {"error": TOO_MANY_DIMS.format("x")})
