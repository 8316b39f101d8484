"""The simdjson fast path for big numeric JSON (core.codecs.fast_json.with_document) gives exactly
what the orjson path gives: the same arrays (dtype, shape, bits) or the same error, for
regular, ragged, mixed and out-of-range payloads, in TFS and KServe JSON."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.codecs import fast_json, kserve_rest, tfs_rest
from core.codecs import json as json_codec
from core.errors import ServingError
from core.tensors import dtypes
from core.tensors.shapes import ANY
from core.tensors.spec import TensorSpec

pytest.importorskip("simdjson")

PROPERTY = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
SPECS = {
    name: {"x": TensorSpec("x", dtypes.BY_KSERVE[name], (ANY,) * 2)}
    for name in ("FP32", "FP16", "FP64", "INT32", "INT64", "UINT8", "UINT64")
}
numbers = (
    st.integers(-(2**65), 2**65)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.floats(-1e3, 1e3, width=32)
    | st.sampled_from([0, -0.0, 2**53 + 1, 1e300])
)
leaves = numbers | st.sampled_from([True, None, "a", [], {"b64": "AA=="}])
rows = st.lists(numbers, min_size=1, max_size=4)
regular = st.integers(1, 4).flatmap(
    lambda n: st.lists(st.lists(numbers, min_size=n, max_size=n), min_size=1, max_size=4)
)
anything = st.recursive(leaves, lambda kids: st.lists(kids, min_size=1, max_size=4), max_leaves=12)
values = regular | st.lists(rows, min_size=1, max_size=3) | anything


def outcome(decode: Any) -> Any:
    try:
        result = decode()
    except ServingError as exc:
        return ("error", type(exc).__name__, exc.message)
    return ("ok", result)


def same(fast: Any, slow: Any) -> None:
    assert fast[0] == slow[0], (fast, slow)
    if fast[0] == "error":
        assert fast == slow
        return
    a, b = fast[1], slow[1]
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape
        assert a[name].tobytes() == b[name].tobytes(), name


@pytest.fixture
def both(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Runs a decode with the fast path forced on (any size) and with simdjson absent."""

    def run(decode: Any) -> tuple[Any, Any]:
        monkeypatch.setattr(fast_json, "FAST_MIN_BYTES", 0)
        fast = outcome(decode)
        monkeypatch.setattr(fast_json, "simdjson", None)
        slow = outcome(decode)
        monkeypatch.undo()
        return fast, slow

    return run


@PROPERTY
@given(
    value=values,
    key=st.sampled_from(["instances", "inputs", "named"]),
    dtype=st.sampled_from(sorted(SPECS)),
)
def test_tfs_fast_equals_exact(both: Any, value: Any, key: str, dtype: str) -> None:
    doc = {"inputs": {"x": value}} if key == "named" else {key: value}
    body = json.dumps(doc).encode()
    fast, slow = both(lambda: tfs_rest.decode(body, SPECS[dtype])[0])
    same(fast, slow)


@PROPERTY
@given(value=values, dtype=st.sampled_from(sorted(SPECS)), flat=st.booleans())
def test_kserve_fast_equals_exact(both: Any, value: Any, dtype: str, flat: bool) -> None:
    try:
        shape = list(np.asarray(value).shape)
    except (ValueError, TypeError):
        shape = [1]
    data = np.asarray(value).reshape(-1).tolist() if flat and shape != [1] else value
    body = json.dumps(
        {
            "id": "[x]",
            "inputs": [{"name": "x", "shape": shape or [1], "datatype": dtype, "data": data}],
            "outputs": [{"name": "y", "parameters": {"binary_data": True}}],
        }
    ).encode()

    def decode() -> dict[str, np.ndarray]:
        request = kserve_rest.decode(body, None, SPECS[dtype])
        assert request.id == "[x]" and request.binary_outputs == {"y": True}
        return request.inputs

    fast, slow = both(decode)
    same(fast, slow)


def test_big_body_takes_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(0).random((1, 3, 64, 64), dtype=np.float32)
    spec = {"input": TensorSpec("input", dtypes.BY_KSERVE["FP32"], (ANY,) * 4)}
    body = orjson.dumps({"instances": x.tolist()})
    assert len(body) > fast_json.FAST_MIN_BYTES
    monkeypatch.setattr(json_codec, "loads", None)  # the orjson path would fail now
    monkeypatch.setattr(tfs_rest, "loads", None)
    inputs, form = tfs_rest.decode(body, spec)
    assert form == tfs_rest.ROW and inputs["input"].tobytes() == x.tobytes()


def test_array_hidden_where_a_number_belongs_is_refused_exactly() -> None:
    """as_buffer would flatten [[1, [2]]]; the '[' count sends it to the exact path."""
    spec = {"x": TensorSpec("x", dtypes.BY_KSERVE["FP32"], (ANY, ANY))}
    row = [0.5] * 2000
    body = orjson.dumps({"instances": [row, row[:-1] + [[0.5]]]})
    assert len(body) > fast_json.FAST_MIN_BYTES
    with pytest.raises(ServingError, match="Not valid ndarray"):
        tfs_rest.decode(body, spec)


TWO = {
    name: {key: TensorSpec(key, dtypes.BY_KSERVE[name], (ANY,) * 3) for key in ("x", "y")}
    for name in SPECS
}
named_rows = st.lists(st.fixed_dictionaries({"x": values, "y": regular}), min_size=1, max_size=3)


@PROPERTY
@given(
    instances=named_rows | st.lists(st.fixed_dictionaries({"x": regular}), min_size=1, max_size=3),
    dtype=st.sampled_from(sorted(SPECS)),
    swap=st.booleans(),
)
def test_tfs_named_rows_fast_equals_exact(
    both: Any, instances: list[dict[str, Any]], dtype: str, swap: bool
) -> None:
    """Rows naming their inputs: stacked by the fast path exactly as the exact path does,
    or the same error (ragged, mixed shapes, names in another order, any dtype)."""
    if swap and len(instances) > 1 and "y" in instances[-1]:
        instances[-1] = dict(reversed(list(instances[-1].items())))
    body = json.dumps({"instances": instances}).encode()
    fast, slow = both(lambda: tfs_rest.decode(body, TWO[dtype])[0])
    same(fast, slow)


def test_big_named_rows_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(1).random((2, 3, 32, 32), dtype=np.float32)
    spec = {"input": TensorSpec("input", dtypes.BY_KSERVE["FP32"], (ANY,) * 4)}
    body = orjson.dumps({"instances": [{"input": row.tolist()} for row in x]})
    assert len(body) > fast_json.FAST_MIN_BYTES
    monkeypatch.setattr(tfs_rest, "loads", None)  # the orjson path would fail now
    inputs, form = tfs_rest.decode(body, spec)
    assert form == tfs_rest.ROW and inputs["input"].tobytes() == x.tobytes()
