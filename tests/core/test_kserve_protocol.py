"""KServe v2 / TFS REST protocol details, through the App every transport shares: bodies on
both sides of the fast JSON path's threshold answer alike (NUL in a key, unhashable
"datatype"), non-finite outputs as NaN/Infinity literals, 405 with `Allow`, HEAD as GET,
`id` and `parameters` checked as OVMS checks them, health and ready bodies."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest

from core.api import App, Response, make_request
from core.codecs import fast_json
from core.config import Settings
from core.serving.registry import ModelManager
from demo import models
from tests.core.helpers import save_ir, write_config

PAD = "p" * (fast_json.FAST_MIN_BYTES + 100)
ROW = [1.0, 2.0, 3.0, 4.0]


def nonfinite_model() -> ov.Model:
    """x [N,4] f32 -> big = x * 1e30 (+-inf once |x| > ~3.4e8), nan = big - big (NaN there)."""
    x = ops.parameter([-1, 4], np.float32, name="x")
    x.output(0).set_names({"x"})
    big = ops.multiply(x, ops.constant(np.float32(1e30)))
    big.output(0).set_names({"big"})
    nan = ops.subtract(big, big)
    nan.output(0).set_names({"nan"})
    return ov.Model([big, nan], [x], "nonfinite")


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> App:
    root: Path = tmp_path_factory.mktemp("protocol")
    save_ir(models.scaler(3.0), root / "scaler" / "1")
    save_ir(models.two_inputs(), root / "two_inputs" / "1")
    save_ir(nonfinite_model(), root / "nonfinite" / "1")
    (root / "empty").mkdir()  # no version: never available
    write_config(
        root / "config.json",
        [{"name": n, "base_path": n} for n in ("scaler", "two_inputs", "nonfinite", "empty")],
    )
    settings = Settings(config_path=str(root / "config.json"), cache_dir=str(root / "cache"))
    return App(ModelManager.start(settings), settings)


def call(app: App, method: str, path: str, body: Any = None) -> Response:
    raw = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
    return app.handle(make_request(method, path, raw))


def infer(app: App, doc: dict[str, Any], model: str = "scaler") -> Response:
    return call(app, "POST", f"/v2/models/{model}/infer", doc)


def both_sizes(app: App, doc: dict[str, Any]) -> Response:
    """The answer to `doc` as is and padded over the fast path's threshold: the same."""
    small = infer(app, doc)
    big = infer(app, {**doc, "pad": PAD})
    assert len(json.dumps({**doc, "pad": PAD})) >= fast_json.FAST_MIN_BYTES
    assert (big.status, big.body) == (small.status, small.body)
    return small


def x_input(**extra: Any) -> dict[str, Any]:
    return {"name": "x", "shape": [1, 4], "datatype": "FP32", "data": ROW, **extra}


# -- 39.1 / 39.2: the fast path agrees with the exact one ------------------------------------


@pytest.mark.parametrize("key", ["k\u0000", "\u0000", "a\u0000b\u0001", "\u0000inputs"])
def test_nul_in_any_key_answers_as_a_small_body(app: App, key: str) -> None:
    answer = both_sizes(app, {key: 0, "inputs": [x_input(**{key: 1})]})
    assert answer.status == 200
    assert json.loads(answer.body)["outputs"][0]["data"] == [3.0, 6.0, 9.0, 12.0]


@pytest.mark.parametrize("key", ["k\u0000", "x\u0000"])
def test_tfs_nul_in_an_input_name_answers_as_a_small_body(app: App, key: str) -> None:
    doc = {"inputs": {"x": [[0.5] * 4] * 200, key: [[0.5] * 4] * 200}}
    small = call(app, "POST", "/v1/models/scaler:predict", doc)
    big_body = json.dumps(doc).encode() + b" " * fast_json.FAST_MIN_BYTES
    big = call(app, "POST", "/v1/models/scaler:predict", big_body)
    assert (big.status, big.body) == (small.status, small.body)
    assert (small.status, json.loads(small.body)) == (
        400,
        {"error": f"Invalid number of inputs - Expected: 1; Actual: 2; unexpected input: {key}"},
    )


@pytest.mark.parametrize("datatype", [{}, [], {"a": 1}, [1], None, 1, True])
def test_a_datatype_that_is_not_a_string_is_a_400(app: App, datatype: Any) -> None:
    answer = both_sizes(app, {"inputs": [x_input(datatype=datatype)]})
    assert answer.status == 400
    assert json.loads(answer.body) == {
        "error": "Invalid JSON structure. inputs[0] needs name, shape and datatype"
    }


def test_a_repeated_key_takes_the_last_value_at_any_size(app: App) -> None:
    body = (
        b'{"inputs": [{"name": "x", "shape": [1, 4], "datatype": "INT8", "datatype": "FP32",'
        b' "data": [1, 2, 3, 4]}], "pad": "' + PAD.encode() + b'"}'
    )
    small = infer(app, json.loads(body.replace(PAD.encode(), b"")))
    big = call(app, "POST", "/v2/models/scaler/infer", body)
    assert big.status == small.status == 200 and big.body == small.body


# -- 39.6: id and parameters --------------------------------------------------------------


@pytest.mark.parametrize("request_id", [1, 1.5, True, None, [], {}, ["a"]])
def test_an_id_that_is_not_a_string_is_a_400(app: App, request_id: Any) -> None:
    answer = both_sizes(app, {"id": request_id, "inputs": [x_input()]})
    assert (answer.status, json.loads(answer.body)) == (
        400,
        {"error": "Could not parse input content. Not valid ndarray detected"},
    )


@pytest.mark.parametrize("request_id", ["42", "", "\u00e9\u0000[x]"])
def test_a_string_id_is_echoed(app: App, request_id: str) -> None:
    answer = both_sizes(app, {"id": request_id, "inputs": [x_input()]})
    assert answer.status == 200
    assert json.loads(answer.body)["id"] == request_id


BAD_PARAMETERS = [[], "binary", 1, None, True, {"a": [1]}, {"a": {}}, {"a": None}]


@pytest.mark.parametrize("params", BAD_PARAMETERS)
@pytest.mark.parametrize("where", ["request", "input", "output"])
def test_parameters_must_be_an_object_of_scalars(app: App, params: Any, where: str) -> None:
    doc: dict[str, Any] = {"inputs": [x_input()]}
    if where == "request":
        doc["parameters"] = params
    elif where == "input":
        doc["inputs"] = [x_input(parameters=params)]
    else:
        doc["outputs"] = [{"name": "y", "parameters": params}]
    answer = both_sizes(app, doc)
    assert (answer.status, json.loads(answer.body)) == (
        400,
        {"error": "Could not parse request parameters"},
    )


def test_scalar_parameters_are_taken(app: App) -> None:
    params = {"s": "x", "i": 1, "f": 0.5, "b": False}
    answer = both_sizes(
        app,
        {
            "parameters": params,
            "inputs": [x_input(parameters=params)],
            "outputs": [{"name": "y", "parameters": params}],
        },
    )
    assert answer.status == 200


@pytest.mark.parametrize("flag", ["false", "true", 1, 0])
def test_binary_data_asks_for_binary_only_when_true(app: App, flag: Any) -> None:
    """A flag that is not JSON true answers in JSON, as binary_data_output: "false" once
    sent the output as binary."""
    answer = both_sizes(
        app,
        {"inputs": [x_input()], "outputs": [{"name": "y", "parameters": {"binary_data": flag}}]},
    )
    assert answer.headers["content-type"] == "application/json"
    assert json.loads(answer.body)["outputs"][0]["data"] == [3.0, 6.0, 9.0, 12.0]


# -- 39.4: non-finite outputs ---------------------------------------------------------------

BIG_X = [[1.0, -1e10, 1e10, 0.0]]
WANT_BIG = [1e30, -math.inf, math.inf, 0.0]
WANT_NAN = [0.0, math.nan, math.nan, 0.0]


def same_floats(got: list[Any], want: list[float]) -> bool:
    return len(got) == len(want) and all(
        isinstance(g, float) and (math.isnan(g) if math.isnan(w) else math.isclose(g, w))
        for g, w in zip(got, want, strict=True)
    )


def test_kserve_json_writes_nan_and_infinity_literals(app: App) -> None:
    answer = infer(app, {"inputs": [x_input(data=BIG_X[0])]}, "nonfinite")
    assert answer.status == 200
    assert b"null" not in answer.body
    assert b"-Infinity" in answer.body and b"NaN" in answer.body
    outputs = {o["name"]: o["data"] for o in json.loads(answer.body)["outputs"]}
    assert same_floats(outputs["big"], WANT_BIG) and same_floats(outputs["nan"], WANT_NAN)


@pytest.mark.parametrize("form", ["instances", "inputs"])
def test_tfs_json_writes_nan_and_infinity_literals(app: App, form: str) -> None:
    answer = call(app, "POST", "/v1/models/nonfinite:predict", {form: BIG_X})
    assert answer.status == 200 and b"null" not in answer.body
    doc = json.loads(answer.body)
    got = (
        doc["predictions"][0]
        if form == "instances"
        else {name: value[0] for name, value in doc["outputs"].items()}
    )
    assert same_floats(got["big"], WANT_BIG) and same_floats(got["nan"], WANT_NAN)


def test_binary_output_keeps_the_bits(app: App) -> None:
    answer = infer(
        app,
        {"inputs": [x_input(data=BIG_X[0])], "parameters": {"binary_data_output": True}},
        "nonfinite",
    )
    cut = int(answer.headers["inference-header-content-length"])
    header = json.loads(answer.body[:cut])
    sizes = [o["parameters"]["binary_data_size"] for o in header["outputs"]]
    big = np.frombuffer(answer.body[cut : cut + sizes[0]], np.float32)
    assert big.tolist()[1:3] == [-math.inf, math.inf]


# -- 39.5: 405 with Allow, HEAD as GET --------------------------------------------------------

GET_PATHS = [
    "/v1/models/scaler",
    "/v1/models/scaler/versions/1/metadata",
    "/v1/config",
    "/v2",
    "/v2/health/live",
    "/v2/health/ready",
    "/v2/models/scaler",
    "/v2/models/scaler/versions/1",
    "/v2/models/scaler/ready",
    "/metrics",
]
POST_PATHS = [
    "/v1/models/scaler:predict",
    "/v1/models/scaler:classify",
    "/v1/config/reload",
    "/v2/models/scaler/infer",
    "/v2/models/scaler/versions/1/infer",
]


@pytest.mark.parametrize("path", GET_PATHS)
@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_a_wrong_method_on_a_get_route_is_a_405_with_allow(
    app: App, path: str, method: str
) -> None:
    answer = call(app, method, path)
    assert answer.status == 405 and answer.headers["allow"] == "GET, HEAD"
    assert "error" in json.loads(answer.body)


@pytest.mark.parametrize("path", POST_PATHS)
@pytest.mark.parametrize("method", ["GET", "HEAD", "PUT", "DELETE"])
def test_a_wrong_method_on_a_post_route_is_a_405_with_allow(
    app: App, path: str, method: str
) -> None:
    answer = call(app, method, path)
    assert answer.status == 405 and answer.headers["allow"] == "POST"


@pytest.mark.parametrize("path", [*GET_PATHS, "/v2/models/nope/ready", "/v1/models/nope"])
def test_head_answers_as_get(app: App, path: str) -> None:
    """The App gives HEAD the GET answer; the transport sends its head only (see
    tests/handlers for the server)."""
    got, head = call(app, "GET", path), call(app, "HEAD", path)
    assert (head.status, dict(head.headers), head.body) == (got.status, dict(got.headers), got.body)


# -- 39.7 and 31.3: health and ready bodies ---------------------------------------------------


def test_health_bodies(app: App) -> None:
    assert (
        call(app, "GET", "/v2/health/live").status,
        json.loads(call(app, "GET", "/v2/health/live").body),
    ) == (200, {"live": True})
    ready = call(app, "GET", "/v2/health/ready")
    assert (ready.status, json.loads(ready.body)) == (200, {"ready": True})
    assert ready.headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    "path",
    [
        "/v2/models/scaler/ready",
        "/v2/models/scaler/versions/1/ready",
        "/v2/models/scaler/versions/0/ready",
    ],
)
def test_model_ready_body(app: App, path: str) -> None:
    answer = call(app, "GET", path)
    assert (answer.status, json.loads(answer.body)) == (200, {"ready": True})


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("/v2/models/nope/ready", "Model with requested name is not found - name: nope"),
        (
            "/v2/models/scaler/versions/7/ready",
            "Model with requested version is not found - name: scaler; version: 7",
        ),
    ],
)
def test_ready_of_an_unknown_model_is_a_404_error_object(app: App, path: str, error: str) -> None:
    answer = call(app, "GET", path)
    assert (answer.status, json.loads(answer.body)) == (404, {"error": error})


def test_not_ready_forms(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    answer = call(app, "GET", "/v2/models/empty/ready")
    assert answer.status == 404
    doc = json.loads(answer.body)
    assert doc["ready"] is False and "empty" in doc["error"]
    monkeypatch.setattr(app.manager, "ready", False)
    answer = call(app, "GET", "/v2/health/ready")
    assert (answer.status, json.loads(answer.body)) == (
        503,
        {"ready": False, "error": "Server is not ready yet"},
    )
