"""Property tests for the codecs tests/core/codecs/test_codec_properties.py does not reach: the gRPC
codecs (TFS TensorProto, KServe ModelInferRequest, both from arbitrary wire bytes and from
arbitrary well-typed messages), the image codec, and KServe REST with edge-case declared
shapes. Each input either decodes to exactly what
was encoded or raises a ServingError; no other exception escapes.

Example counts: run with `--hypothesis-show-statistics`.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from core.codecs import images, kserve_grpc, kserve_rest, tfs_grpc
from core.codecs.binary import to_binary
from core.errors import ServingError
from core.tensors import dtypes
from core.tensors.shapes import ANY
from core.tensors.spec import TensorSpec
from protos.gen.kserve import grpc_predict_v2_pb2 as kfs
from protos.gen.tensorflow.core.framework import tensor_pb2
from protos.gen.tensorflow_serving.apis import predict_pb2
from tests.core.helpers import encode_image

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NUMERIC = [row for row in dtypes.ROWS if row is not dtypes.BYTES and row.kserve != "FP16"]
TF_ENUMS = st.sampled_from([row.tf_enum for row in dtypes.ROWS]) | st.integers(-3, 40)
DIMS = st.lists(st.integers(-2, 6) | st.sampled_from([2**31, 2**40, 2**62]), max_size=4)
scalars = st.floats(width=32, allow_nan=False) | st.integers(-(2**40), 2**40).map(float)


def _json(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


def _nothing_but_serving_errors(call: Any) -> Any:
    try:
        return call()
    except ServingError:
        return None


# -- TF Serving gRPC -----------------------------------------------------------------------------


@PROPERTY
@given(wire=st.binary(max_size=400))
def test_tfs_predict_from_any_wire_bytes(wire: bytes) -> None:
    try:
        request = predict_pb2.PredictRequest.FromString(wire)
    except DecodeError:
        return  # grpc refuses it before any servicer runs
    _nothing_but_serving_errors(lambda: tfs_grpc.decode_inputs(request))


@PROPERTY
@given(
    dtype=TF_ENUMS,
    dims=DIMS,
    content=st.binary(max_size=64),
    floats=st.lists(scalars, max_size=8),
    ints=st.lists(st.integers(-(2**31), 2**31 - 1), max_size=8),
    int64s=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=8),
    strings=st.lists(st.binary(max_size=8), max_size=4),
    unknown_rank=st.booleans(),
)
def test_tfs_tensor_proto_any_fields(
    dtype: int,
    dims: list[int],
    content: bytes,
    floats: list[float],
    ints: list[int],
    int64s: list[int],
    strings: list[bytes],
    unknown_rank: bool,
) -> None:
    proto = tensor_pb2.TensorProto(dtype=dtype)  # type: ignore[arg-type]
    for size in dims:
        proto.tensor_shape.dim.add(size=size)
    proto.tensor_shape.unknown_rank = unknown_rank
    if content:
        proto.tensor_content = content
    proto.float_val.extend(floats)
    proto.double_val.extend(floats)
    proto.int_val.extend(ints)
    proto.int64_val.extend(int64s)
    proto.half_val.extend([i & 0xFFFF for i in ints])
    proto.uint32_val.extend([i & 0xFFFFFFFF for i in ints])
    proto.bool_val.extend([bool(i & 1) for i in ints])
    proto.string_val.extend(strings)
    array = _nothing_but_serving_errors(lambda: tfs_grpc.to_numpy(proto, "x"))
    if array is not None:
        assert list(array.shape) == dims


@PROPERTY
@given(
    st.sampled_from(NUMERIC).flatmap(
        lambda row: hnp.arrays(
            row.numpy, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
        )
    )
)
def test_tfs_typed_fields_round_trip(array: np.ndarray) -> None:
    """Values in the typed *_val fields (as TensorFlow's make_tensor_proto fills them)."""
    row = dtypes.from_numpy(array.dtype)
    proto = tensor_pb2.TensorProto(dtype=row.tf_enum)  # type: ignore[arg-type]
    for size in array.shape:
        proto.tensor_shape.dim.add(size=size)
    field = tfs_grpc._TYPED_FIELD[row.tf]
    getattr(proto, field).extend(array.reshape(-1).tolist())
    back = tfs_grpc.to_numpy(proto, "x")
    assert back.dtype == array.dtype and back.shape == array.shape
    assert back.tobytes() == array.tobytes()


@PROPERTY
@given(items=st.lists(st.binary(max_size=16), min_size=1, max_size=6))
def test_tfs_string_round_trip(items: list[bytes]) -> None:
    array = np.empty(len(items), dtype=object)
    array[:] = items
    proto = tensor_pb2.TensorProto()
    tfs_grpc.fill_proto(array, proto)
    assert tfs_grpc.to_numpy(proto, "s").tolist() == items


# -- KServe gRPC -------------------------------------------------------------------------------


@PROPERTY
@given(wire=st.binary(max_size=400))
def test_kserve_infer_from_any_wire_bytes(wire: bytes) -> None:
    try:
        request = kfs.ModelInferRequest.FromString(wire)
    except DecodeError:
        return
    _nothing_but_serving_errors(lambda: kserve_grpc.decode_inputs(request))
    _nothing_but_serving_errors(lambda: kserve_grpc.parse_version(request.model_version))


kserve_types = st.sampled_from([row.kserve for row in dtypes.ROWS] + ["FP99", "", "fp32"])


@PROPERTY
@given(
    tensors_=st.lists(st.tuples(st.sampled_from(["x", "y", "x"]), kserve_types, DIMS), max_size=3),
    raw=st.none() | st.lists(st.binary(max_size=48), max_size=4),
    fp32=st.lists(st.floats(width=32), max_size=8),
    ints=st.lists(st.integers(-(2**31), 2**31 - 1), max_size=8),
    strings=st.lists(st.binary(max_size=8), max_size=4),
)
def test_kserve_request_any_fields(
    tensors_: list[tuple[str, str, list[int]]],
    raw: list[bytes] | None,
    fp32: list[float],
    ints: list[int],
    strings: list[bytes],
) -> None:
    request = kfs.ModelInferRequest(model_name="m")
    for name, datatype, shape in tensors_:
        tensor = request.inputs.add(
            name=name, datatype=datatype, shape=[max(d, -(2**62)) for d in shape]
        )
        tensor.contents.fp32_contents.extend(fp32)
        tensor.contents.int_contents.extend(ints)
        tensor.contents.bytes_contents.extend(strings)
    if raw is not None:
        request.raw_input_contents.extend(raw)
    decoded = _nothing_but_serving_errors(lambda: kserve_grpc.decode_inputs(request))
    if decoded is not None:
        assert set(decoded) == {t[0] for t in tensors_}


any_numeric = st.sampled_from(NUMERIC + [dtypes.BY_KSERVE["FP16"]]).flatmap(
    lambda row: hnp.arrays(
        row.numpy, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
    )
)


@PROPERTY
@given(array=any_numeric)
def test_kserve_raw_round_trip(array: np.ndarray) -> None:
    row = dtypes.from_numpy(array.dtype)
    request = kfs.ModelInferRequest(model_name="m")
    request.inputs.add(name="x", datatype=row.kserve, shape=array.shape)
    request.raw_input_contents.append(to_binary(array))
    back = kserve_grpc.decode_inputs(request)["x"]
    assert back.dtype == array.dtype and back.shape == array.shape
    assert back.tobytes() == array.tobytes()


@PROPERTY
@given(
    st.sampled_from([r for r in NUMERIC if r.kserve in kserve_grpc._CONTENTS]).flatmap(
        lambda row: hnp.arrays(row.numpy, hnp.array_shapes(min_dims=1, max_dims=3, max_side=4))
    )
)
def test_kserve_typed_contents_round_trip(array: np.ndarray) -> None:
    row = dtypes.from_numpy(array.dtype)
    request = kfs.ModelInferRequest(model_name="m")
    tensor = request.inputs.add(name="x", datatype=row.kserve, shape=array.shape)
    getattr(tensor.contents, kserve_grpc._CONTENTS[row.kserve]).extend(array.reshape(-1).tolist())
    back = kserve_grpc.decode_inputs(request)["x"]
    assert back.dtype == array.dtype and back.tobytes() == array.tobytes()


@PROPERTY
@given(items=st.lists(st.binary(max_size=16), min_size=1, max_size=6), raw=st.booleans())
def test_kserve_bytes_round_trip(items: list[bytes], raw: bool) -> None:
    array = np.empty(len(items), dtype=object)
    array[:] = items
    request = kfs.ModelInferRequest(model_name="m")
    tensor = request.inputs.add(name="s", datatype="BYTES", shape=[len(items)])
    if raw:
        request.raw_input_contents.append(to_binary(array))
    else:
        tensor.contents.bytes_contents.extend(items)
    assert kserve_grpc.decode_inputs(request)["s"].tolist() == items


# -- KServe REST: declared shapes (rarely drawn by tests/core/codecs/test_codec_properties.py) --

EDGE_DIMS = st.lists(st.sampled_from([0, 1, 2, 4, 2**31, 2**40, 2**62]), max_size=4)


@PROPERTY
@given(row=st.sampled_from(NUMERIC), shape=EDGE_DIMS, binary=st.booleans())
def test_kserve_rest_declared_shapes(row: dtypes.DType, shape: list[int], binary: bool) -> None:
    """Zeros of the declared shape, as JSON data or binary: decoded exactly when the shape is
    small enough to exist, else a ServingError (a 0 next to 2**62 once escaped as a 500)."""
    small = max(shape, default=0) <= 4  # else a dim beyond any limit, whatever the count
    array = np.zeros(shape if small else (0,), row.numpy)
    doc: dict[str, Any] = {"name": "x", "shape": shape, "datatype": row.kserve}
    if binary:
        doc["parameters"] = {"binary_data_size": array.nbytes}
        header = _json({"inputs": [doc]})
        body, length = header + to_binary(array), str(len(header))
    else:
        doc["data"] = array.reshape(-1).tolist()
        body, length = _json({"inputs": [doc]}), None
    spec = {"x": TensorSpec("x", row, tuple(ANY for _ in shape))}
    try:
        decoded = kserve_rest.decode(body, length, spec).inputs["x"]
    except ServingError:
        assert not small
        return
    assert small and decoded.dtype == array.dtype and decoded.shape == array.shape


# -- images ------------------------------------------------------------------------------------

IMAGE = TensorSpec("img", dtypes.BY_KSERVE["FP32"], (ANY, (8, 8), (8, 8), (3, 3)), "NHWC")
PNG_HEAD = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"


@PROPERTY
@given(
    data=st.binary(max_size=200)
    | st.binary(max_size=200).map(lambda b: PNG_HEAD + b)
    | st.binary(max_size=200).map(lambda b: b"\xff\xd8\xff\xe0" + b),
    count=st.integers(1, 2),
)
def test_images_any_bytes(data: bytes, count: int) -> None:
    items = np.empty(count, dtype=object)
    items[:] = [data] * count
    _nothing_but_serving_errors(lambda: images.decode_batch(items, IMAGE))


@PROPERTY
@given(pixels=hnp.arrays(np.uint8, (8, 8, 3)))
def test_png_round_trip(pixels: np.ndarray) -> None:
    """PNG is lossless and 8x8 needs no resize: the tensor is the pixels, BGR as OpenCV."""
    items = np.empty(1, dtype=object)
    items[:] = [encode_image(pixels, "PNG")]
    batch = images.decode_batch(items, IMAGE)
    assert batch.shape == (1, 8, 8, 3)
    assert np.array_equal(batch[0], pixels[:, :, ::-1].astype(np.float32))
