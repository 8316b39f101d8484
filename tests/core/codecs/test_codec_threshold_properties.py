"""Property tests: every generated request is answered the same below and above the fast JSON
path's threshold (core.codecs.fast_json.FAST_MIN_BYTES; pysimdjson decodes the bigger bodies).

Each body is sent as generated and padded past the threshold (whitespace before or after the
document, or a leading "pad" member that the protocol ignores), through the App every transport
shares, on the TFS and the KServe routes of models of several input types. Both answers must
have the same status and the same body; a 500 (an exception escaping a codec) fails the test.
The generators put unicode and control characters (NUL included) in keys and strings, a JSON
value of any type in every field, and numbers at and past every integer limit and float range.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.api import App, Response, make_request
from core.codecs import fast_json
from core.config import Settings
from core.serving.registry import ModelManager
from core.tensors import dtypes
from demo import models
from tests.core.helpers import save_ir, write_config

pytest.importorskip("simdjson")

PROPERTY = settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
MODELS = {"scaler": "FP32", "ints": "INT32", "u64": "UINT64", "i8": "INT8"}
PAD = fast_json.FAST_MIN_BYTES + 64
# Text that is not JSON is read by orjson on both sides; its message says where and what it
# found next, which the padding changes ("unexpected end of data" or "no digit after sign"
# for b"-"): such answers are compared up to the message's fixed part.
_SYNTAX = re.compile(rb'(The file is not valid json) - [^"]*')


def _identity(dtype: type, name: str) -> ov.Model:
    x = ops.parameter([-1, 4], dtype, name="x")
    x.output(0).set_names({"x"})
    y = ops.convert(x, dtype)
    y.output(0).set_names({"y"})
    return ov.Model([y], [x], name)


def _two_inputs() -> ov.Model:
    """a [N,4], b [M,4] -> a * 2, b * 3: two inputs whose shapes any valid request may pick
    independently (an a + b model fails inside OpenVINO when N != M, a 500 by design)."""
    a = ops.parameter([-1, 4], np.float32, name="a")
    b = ops.parameter([-1, 4], np.float32, name="b")
    a.output(0).set_names({"a"})
    b.output(0).set_names({"b"})
    twice = ops.multiply(a, np.array([2], np.float32))
    twice.output(0).set_names({"twice"})
    thrice = ops.multiply(b, np.array([3], np.float32))
    thrice.output(0).set_names({"thrice"})
    return ov.Model([twice, thrice], [a, b], "two_inputs")


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> App:
    root: Path = tmp_path_factory.mktemp("threshold")
    save_ir(models.scaler(3.0), root / "scaler" / "1")
    save_ir(_two_inputs(), root / "two_inputs" / "1")
    for name, datatype in MODELS.items():
        if name != "scaler":
            save_ir(_identity(dtypes.BY_KSERVE[datatype].numpy, name), root / name / "1")
    write_config(
        root / "config.json", [{"name": n, "base_path": n} for n in [*MODELS, "two_inputs"]]
    )
    settings = Settings(config_path=str(root / "config.json"), cache_dir=str(root / "cache"))
    return App(ModelManager.start(settings), settings)


# -- generators --------------------------------------------------------------------------------

texts = st.text(st.characters(codec="utf-8"), max_size=6)  # NUL, controls, astral, all
keys = texts | st.sampled_from(["inputs", "instances", "data", "name", "b64", "x", "a"])
limits = [
    v
    for dt in ("INT8", "INT32", "INT64", "UINT8", "UINT64")
    for info in [np.iinfo(dtypes.BY_KSERVE[dt].numpy)]
    for v in (int(info.min), int(info.max), int(info.min) - 1, int(info.max) + 1)
]
numbers = (
    st.integers(-(2**70), 2**70)
    | st.sampled_from(limits)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0.5, -0.0, 1e308, 5e-324, 3.5e38, 2.0**53 + 2, 1.0])
)
scalars = st.none() | st.booleans() | numbers | texts
any_json = st.recursive(
    scalars,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(keys, kids, max_size=3),
    max_leaves=10,
)


@st.composite
def rows(draw: st.DrawFn) -> list[list[Any]]:
    """n rows of 4 numbers: mostly servable, sometimes with one odd value."""
    count = draw(st.integers(1, 3))
    values = draw(
        st.lists(st.lists(numbers, min_size=4, max_size=4), min_size=count, max_size=count)
    )
    if draw(st.booleans()):
        values = [[int(v) % 100 if isinstance(v, int) else 1.0 for v in row] for row in values]
    return values


def field(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field's value: mostly a good one, sometimes a JSON value of any type."""
    return st.one_of(good, good, good, good, any_json)


def exact(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return good


good_params = st.dictionaries(keys, st.booleans() | numbers | texts, max_size=3)
params = field(good_params)
INPUTS = {"two_inputs": ["a", "b"]}  # the other models take "x"
DATATYPES = ["FP32", "INT32", "UINT64", "INT8", "FP16", "BYTES", "BOOL", "fp32"]


@st.composite
def kserve_tensor(draw: st.DrawFn, name: str, datatype: str, messy: bool) -> dict[str, Any]:
    """One input, what the model takes (its name and datatype, a matching shape) or, when
    `messy`, any JSON value in any field now and then."""
    pick = field if messy else exact
    data = draw(rows())
    flat = draw(st.booleans())
    doc = {
        "name": draw(
            pick(st.just(name) | st.sampled_from(["x", "a", "b", "q"]) if messy else st.just(name))
        ),
        "shape": draw(pick(st.just([len(data), 4]))),
        "datatype": draw(
            pick(st.just(datatype) | st.sampled_from(DATATYPES) if messy else st.just(datatype))
        ),
        "data": draw(pick(st.just([v for r in data for v in r] if flat else data))),
    }
    if draw(st.booleans()):
        doc["parameters"] = draw(params if messy else good_params)
    extra = draw(st.dictionaries(keys, any_json, max_size=1))
    return {**extra, **doc} if draw(st.booleans()) else {**doc, **extra}


@st.composite
def kserve_docs(draw: st.DrawFn, model: str) -> dict[str, Any]:
    messy = draw(st.booleans())
    pick = field if messy else exact
    datatype = MODELS.get(model, "FP32")
    inputs = st.tuples(*[kserve_tensor(n, datatype, messy) for n in INPUTS.get(model, ["x"])]).map(
        list
    )
    if messy:
        inputs |= st.lists(kserve_tensor("x", datatype, messy), min_size=1, max_size=2)
    return draw(
        st.fixed_dictionaries(
            {"inputs": pick(inputs)},
            optional={
                "id": pick(texts),
                "parameters": params if messy else good_params,
                "outputs": pick(
                    st.lists(
                        st.fixed_dictionaries(
                            {"name": pick(st.sampled_from(["y", "sum", "product", "nope"]))},
                            optional={"parameters": params if messy else good_params},
                        ),
                        max_size=2,
                    )
                ),
                "\u0000": any_json,
                "k\u0000\u001f": any_json,
            },
        )
    )


tfs_docs = st.one_of(
    st.fixed_dictionaries({"instances": field(rows())}),
    st.fixed_dictionaries({"inputs": field(rows())}),
    st.fixed_dictionaries(
        {
            "inputs": st.dictionaries(
                st.sampled_from(["x", "a", "b"]) | keys, field(rows()), min_size=1, max_size=2
            )
        }
    ),
    st.dictionaries(keys, any_json, max_size=3),
).flatmap(
    lambda doc: st.fixed_dictionaries(
        {}, optional={"signature_name": field(texts), "x\u0000": any_json}
    ).map(lambda extra: {**doc, **extra})
)


# -- the property ------------------------------------------------------------------------------


def padded(body: bytes, how: str) -> bytes:
    if how == "before":
        return b" \n\t\r" * (PAD // 4) + body
    if how == "member" and body.startswith(b"{") and body != b"{}":
        return b'{"pad": "' + b"p" * PAD + b'", ' + body[1:]
    return body + b" " * PAD


def answer(app: App, path: str, body: bytes) -> Response:
    return app.handle(make_request("POST", path, body))


def same_answer(app: App, path: str, body: bytes, how: str) -> None:
    small, big = answer(app, path, body), answer(app, path, padded(body, how))
    assert len(padded(body, how)) >= fast_json.FAST_MIN_BYTES
    assert small.status != 500, small.body
    assert big.status != 500, big.body
    assert (big.status, _SYNTAX.sub(rb"\1", big.body)) == (
        small.status,
        _SYNTAX.sub(rb"\1", small.body),
    ), (body, how)


def dumped(doc: Any, ascii_only: bool) -> bytes:
    return json.dumps(doc, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


HOW = st.sampled_from(["before", "after", "member"])


@PROPERTY
@given(
    model=st.sampled_from([*MODELS, "two_inputs"]),
    data=st.data(),
    how=HOW,
    ascii_only=st.booleans(),
)
def test_kserve_answers_alike_at_any_size(
    app: App, model: str, data: st.DataObject, how: str, ascii_only: bool
) -> None:
    doc = data.draw(kserve_docs(model), label="doc")
    same_answer(app, f"/v2/models/{model}/infer", dumped(doc, ascii_only), how)


@PROPERTY
@given(
    doc=tfs_docs, model=st.sampled_from([*MODELS, "two_inputs"]), how=HOW, ascii_only=st.booleans()
)
def test_tfs_answers_alike_at_any_size(
    app: App, doc: dict[str, Any], model: str, how: str, ascii_only: bool
) -> None:
    same_answer(app, f"/v1/models/{model}:predict", dumped(doc, ascii_only), how)


@PROPERTY
@given(body=st.binary(max_size=200), how=HOW, tfs=st.booleans())
def test_any_bytes_answer_alike_at_any_size(app: App, body: bytes, how: str, tfs: bool) -> None:
    path = "/v1/models/scaler:predict" if tfs else "/v2/models/scaler/infer"
    same_answer(app, path, body, how)


def test_the_padding_reaches_the_fast_path(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """A padded numeric body is decoded by simdjson, not orjson (the property compares both)."""
    body = padded(
        json.dumps(
            {
                "inputs": [
                    {"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]}
                ]
            }
        ).encode(),
        "member",
    )
    monkeypatch.setattr("core.codecs.kserve_rest.loads", None)  # the exact path would fail
    got = answer(app, "/v2/models/scaler/infer", body)
    assert got.status == 200 and json.loads(got.body)["outputs"][0]["data"] == [3, 6, 9, 12]
    monkeypatch.setattr("core.codecs.tfs_rest.loads", None)
    got = answer(
        app, "/v1/models/scaler:predict", padded(b'{"instances": [[1.0, 2.0, 3.0, 4.0]]}', "after")
    )
    assert got.status == 200 and json.loads(got.body) == {"predictions": [[3, 6, 9, 12]]}
