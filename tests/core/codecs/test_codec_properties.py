"""Property tests for the REST codecs: whatever arrives, a request either decodes (and passes or
fails validation) or is refused with a ServingError, never another exception; and tensors the
server encodes decode back bit for bit, in KServe JSON, KServe binary and TFS JSON."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from core.codecs import images, kserve_rest, tfs_rest
from core.errors import ServingError
from core.tensors import dtypes
from core.tensors.shapes import ANY
from core.tensors.spec import TensorSpec, validate

FP32 = dtypes.BY_KSERVE["FP32"]
SPECS: dict[str, dict[str, TensorSpec]] = {
    "scaler": {"x": TensorSpec("x", FP32, (ANY, (4, 4)))},
    "two_inputs": {
        "a": TensorSpec("a", FP32, (ANY, (4, 4))),
        "b": TensorSpec("b", FP32, (ANY, (4, 4))),
    },
    "image": {"img": TensorSpec("img", FP32, (ANY, (8, 8), (8, 8), (3, 3)), "NHWC")},
    "bytes": {"s": TensorSpec("s", dtypes.BYTES, (ANY,))},
}
spec_sets = st.sampled_from(sorted(SPECS)).map(SPECS.__getitem__)
PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.sampled_from([{"b64": "AAAA"}, {"b64": "%%"}, {"b64": 1}]),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(
            st.sampled_from(["x", "a", "b", "img", "s", "b64", "z"]), children, max_size=4
        )
    ),
    max_leaves=30,
)


def _serve(specs: dict[str, TensorSpec], inputs: dict[str, np.ndarray]) -> None:
    """What the server does with decoded inputs before inference."""
    validate(specs, images.decode_inputs(specs, inputs))


# -- nothing but ServingError ------------------------------------------------------------------


@PROPERTY
@given(body=st.binary(max_size=300), specs=spec_sets)
def test_tfs_random_bytes(body: bytes, specs: dict[str, TensorSpec]) -> None:
    try:
        inputs, _ = tfs_rest.decode(body, specs)
        _serve(specs, inputs)
    except ServingError:
        pass


@PROPERTY
@given(
    value=json_values, key=st.sampled_from(["instances", "inputs", "both", "bare"]), specs=spec_sets
)
def test_tfs_random_json(value: Any, key: str, specs: dict[str, TensorSpec]) -> None:
    doc: Any = (
        {"instances": value, "inputs": value}
        if key == "both"
        else value
        if key == "bare"
        else {key: value}
    )
    try:
        inputs, form = tfs_rest.decode(json.dumps(doc).encode(), specs)
        _serve(specs, inputs)
    except ServingError:
        return
    assert form in (tfs_rest.ROW, tfs_rest.COLUMN)


@PROPERTY
@given(
    body=st.binary(max_size=300),
    header=st.none() | st.integers(-5, 400).map(str) | st.text(max_size=5),
    specs=spec_sets,
)
def test_kserve_random_bytes(body: bytes, header: str | None, specs: dict[str, TensorSpec]) -> None:
    try:
        request = kserve_rest.decode(body, header, specs)
        _serve(specs, request.inputs)
    except ServingError:
        pass


datatypes = st.sampled_from([row.kserve for row in dtypes.ROWS] + ["FP99", ""])
shapes = (
    st.lists(st.integers(-2, 6) | st.sampled_from([2**31, 2**62]) | st.booleans(), max_size=4)
    | json_values
)
parameters = st.none() | st.fixed_dictionaries(
    {},
    optional={
        "binary_data_size": st.integers(-1, 64) | json_values,
        "binary_data": st.booleans() | json_values,
    },
)
tensor_docs = st.fixed_dictionaries(
    {"name": st.sampled_from(["x", "a", "b", "img", "s", "zz"])},
    optional={
        "shape": shapes,
        "datatype": datatypes,
        "data": json_values,
        "parameters": parameters,
    },
)
kserve_docs = st.fixed_dictionaries(
    {"inputs": st.lists(tensor_docs, max_size=3) | json_values},
    optional={
        "id": json_values,
        "parameters": json_values,
        "outputs": st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from(["y", "sum", "nope"])}, optional={"parameters": parameters}
            ),
            max_size=2,
        )
        | json_values,
    },
)


@PROPERTY
@given(doc=kserve_docs, tail=st.binary(max_size=64), specs=spec_sets)
def test_kserve_random_json(doc: dict[str, Any], tail: bytes, specs: dict[str, TensorSpec]) -> None:
    header = json.dumps(doc).encode()
    try:
        request = kserve_rest.decode(header + tail, str(len(header)) if tail else None, specs)
        _serve(specs, request.inputs)
    except ServingError:
        pass


# -- round trips -------------------------------------------------------------------------------

finite_arrays = hnp.arrays(
    np.float32,
    hnp.array_shapes(min_dims=0, max_dims=3, max_side=5),
    elements=st.floats(width=32, allow_nan=False, allow_infinity=False),
)
any_arrays = hnp.arrays(
    np.float32, hnp.array_shapes(min_dims=0, max_dims=3, max_side=5), elements=st.floats(width=32)
)


def _any_spec(name: str, array: np.ndarray, dtype: dtypes.DType = FP32) -> dict[str, TensorSpec]:
    return {name: TensorSpec(name, dtype, tuple(ANY for _ in array.shape))}


def _as_request(body: bytes, headers: dict[str, str]) -> tuple[bytes, str | None]:
    """A server response, re-sent as a request: the tensor format is the same both ways."""
    length = headers.get("inference-header-content-length")
    cut = int(length) if length is not None else len(body)
    doc = orjson.loads(body[:cut])
    doc["inputs"] = doc.pop("outputs")
    header = json.dumps(doc).encode()
    return header + body[cut:], (str(len(header)) if length is not None else None)


def _same_bits(got: np.ndarray, want: np.ndarray) -> bool:
    return (
        got.dtype == want.dtype
        and got.shape == want.shape
        and np.array_equal(got.view(np.uint32), want.view(np.uint32))
    )


@PROPERTY
@given(array=finite_arrays)
def test_kserve_json_round_trip(array: np.ndarray) -> None:
    body, headers = kserve_rest.encode("m", 1, {"y": array}, kserve_rest.InferRequest({}))
    assert headers == {"content-type": "application/json"}
    request = kserve_rest.decode(*_as_request(body, headers), _any_spec("y", array))
    assert _same_bits(request.inputs["y"], array)


@PROPERTY
@given(array=any_arrays)
def test_kserve_binary_round_trip(array: np.ndarray) -> None:
    body, headers = kserve_rest.encode(
        "m", 1, {"y": array}, kserve_rest.InferRequest({}, binary_default=True)
    )
    assert headers["content-type"] == "application/octet-stream"
    request = kserve_rest.decode(*_as_request(body, headers), _any_spec("y", array))
    assert _same_bits(request.inputs["y"], array)


@PROPERTY
@given(items=st.lists(st.binary(max_size=20), min_size=1, max_size=6))
def test_kserve_binary_bytes_round_trip(items: list[bytes]) -> None:
    array = np.empty(len(items), dtype=object)
    array[:] = items
    body, headers = kserve_rest.encode(
        "m", 1, {"s": array}, kserve_rest.InferRequest({}, binary_default=True)
    )
    request = kserve_rest.decode(*_as_request(body, headers), _any_spec("s", array, dtypes.BYTES))
    assert request.inputs["s"].tolist() == items


@PROPERTY
@given(array=finite_arrays.filter(lambda a: a.ndim >= 1 and a.size > 0))
def test_tfs_column_round_trip(array: np.ndarray) -> None:
    body = tfs_rest.encode({"y": array}, tfs_rest.COLUMN)
    doc = orjson.loads(body)
    inputs, form = tfs_rest.decode(
        orjson.dumps({"inputs": {"y": doc["outputs"]}}), _any_spec("y", array)
    )
    assert form == tfs_rest.COLUMN
    assert _same_bits(inputs["y"], array)
