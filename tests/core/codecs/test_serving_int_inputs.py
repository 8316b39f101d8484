"""JSON numbers for integer inputs: values the input's type holds are served exactly; a value
it cannot hold (-1 or 256 for UINT8, 1.5 or 2**31 for INT32) is a 400 naming the input, on
the TFS and the KServe JSON routes, small bodies and big ones (the simdjson path) alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest

from core.api import App, make_request
from core.config import Settings
from core.serving.registry import ModelManager
from tests.core.helpers import save_ir, write_config

ROWS_BIG = 3000  # 3000 x 4 values: well over the fast path's threshold


def _plus_one(dtype: type, name: str) -> ov.Model:
    x = ops.parameter([-1, 4], dtype, name="x")
    x.output(0).set_names({"x"})
    y = ops.add(x, ops.constant(np.array(1, dtype)))
    y.output(0).set_names({"y"})
    return ov.Model([y], [x], name)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> App:
    root: Path = tmp_path_factory.mktemp("ints")
    save_ir(_plus_one(np.uint8, "u8"), root / "u8" / "1")
    save_ir(_plus_one(np.int32, "i32"), root / "i32" / "1")
    write_config(root / "config.json", [{"name": n, "base_path": n} for n in ("u8", "i32")])
    settings = Settings(config_path=str(root / "config.json"), cache_dir=str(root / "cache"))
    return App(ModelManager.start(settings), settings)


def _tfs(app: App, model: str, rows: Any) -> tuple[int, Any]:
    response = app.handle(
        make_request(
            "POST", f"/v1/models/{model}:predict", json.dumps({"instances": rows}).encode()
        )
    )
    return response.status, json.loads(response.body)


def _kserve(app: App, model: str, rows: Any) -> tuple[int, Any]:
    datatype = {"u8": "UINT8", "i32": "INT32"}[model]
    doc = {"inputs": [{"name": "x", "shape": [len(rows), 4], "datatype": datatype, "data": rows}]}
    response = app.handle(
        make_request("POST", f"/v2/models/{model}/infer", json.dumps(doc).encode())
    )
    return response.status, json.loads(response.body)


@pytest.mark.parametrize("send", [_tfs, _kserve], ids=["tfs", "kserve"])
@pytest.mark.parametrize("rows", [1, ROWS_BIG], ids=["small", "big"])
def test_values_the_type_holds_are_served(app: App, send: Any, rows: int) -> None:
    values = [[0, 7, 200, 254]] * rows
    status, doc = send(app, "u8", values)
    assert status == 200, doc
    got = doc["predictions"] if "predictions" in doc else doc["outputs"][0]["data"]
    assert np.array(got).reshape(-1).tolist()[:4] == [1, 8, 201, 255]
    status, doc = send(app, "i32", [[-(2**31), 2**31 - 2, 3.0, -4]] * rows)
    assert status == 200, doc  # an integral float (3.0) is taken as the integer it is


@pytest.mark.parametrize("send", [_tfs, _kserve], ids=["tfs", "kserve"])
@pytest.mark.parametrize("rows", [1, ROWS_BIG], ids=["small", "big"])
@pytest.mark.parametrize(
    ("model", "bad", "bounds"),
    [
        ("u8", -1, "from 0 to 255"),
        ("u8", 256, "from 0 to 255"),
        ("u8", 2.5, "from 0 to 255"),
        ("i32", 1.5, "from -2147483648 to 2147483647"),
        ("i32", 2**31, "from -2147483648 to 2147483647"),
        ("i32", -(2**31) - 1, "from -2147483648 to 2147483647"),
    ],
)
def test_values_the_type_cannot_hold_are_a_400(
    app: App, send: Any, rows: int, model: str, bad: float, bounds: str
) -> None:
    values = [[1, 2, 3, 4]] * (rows - 1) + [[1, 2, bad, 4]]
    status, doc = send(app, model, values)
    assert (status, doc) == (
        400,
        {"error": f"Invalid value for input x: expected integers {bounds}"},
    )
    assert send(app, model, [[1, 2, 3, 4]])[0] == 200
