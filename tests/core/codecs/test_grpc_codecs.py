"""The gRPC codecs without a server: TensorProto / KServe tensors <-> numpy, and error mapping."""

from __future__ import annotations

import struct
from typing import Any

import grpc
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from core.codecs import kserve_grpc, tfs_grpc
from core.errors import InvalidInputError, ModelNotFoundError
from core.tensors import dtypes
from handlers.grpc_server import _rpc
from protos.gen.kserve import grpc_predict_v2_pb2 as kfs
from protos.gen.tensorflow.core.framework import tensor_pb2, types_pb2

NUMERIC = [row.numpy for row in dtypes.ROWS if row is not dtypes.BYTES]


def _proto(dtype: int, shape: tuple[int, ...], **fields: Any) -> tensor_pb2.TensorProto:
    proto = tensor_pb2.TensorProto(dtype=dtype, **fields)  # type: ignore[arg-type]
    for size in shape:
        proto.tensor_shape.dim.add(size=size)
    return proto


@given(
    st.sampled_from(NUMERIC).flatmap(
        lambda dtype: hnp.arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=3, max_side=4))
    )
)
def test_tensor_content_round_trip(array: np.ndarray) -> None:
    proto = tensor_pb2.TensorProto()
    tfs_grpc.fill_proto(array, proto)
    back = tfs_grpc.to_numpy(proto, "x")
    assert back.dtype == array.dtype and back.shape == array.shape
    assert back.tobytes() == array.tobytes()


def test_typed_fields() -> None:
    half = np.array([1.5, -2.0, 65504.0], np.float16)
    got = tfs_grpc.to_numpy(
        _proto(types_pb2.DT_HALF, (3,), half_val=half.view(np.uint16).tolist()), "h"
    )
    assert got.dtype == np.float16 and np.array_equal(got, half)
    got = tfs_grpc.to_numpy(_proto(types_pb2.DT_UINT8, (2, 2), int_val=[0, 1, 254, 255]), "u")
    assert got.dtype == np.uint8 and got.tolist() == [[0, 1], [254, 255]]
    got = tfs_grpc.to_numpy(_proto(types_pb2.DT_BOOL, (2,), bool_val=[True, False]), "b")
    assert got.tolist() == [True, False]
    got = tfs_grpc.to_numpy(_proto(types_pb2.DT_INT64, (1,), int64_val=[2**40]), "i")
    assert got.dtype == np.int64 and got[0] == 2**40
    strings = tfs_grpc.to_numpy(_proto(types_pb2.DT_STRING, (2,), string_val=[b"a", b"bc"]), "s")
    assert strings.dtype == object and strings.tolist() == [b"a", b"bc"]


def test_content_is_a_view_not_a_copy() -> None:
    proto = _proto(types_pb2.DT_FLOAT, (2, 2), tensor_content=np.ones(4, np.float32).tobytes())
    array = tfs_grpc.to_numpy(proto, "x")
    assert not array.flags.owndata and not array.flags.writeable


@pytest.mark.parametrize(
    ("proto", "message"),
    [
        (
            _proto(types_pb2.DT_FLOAT, (2, 2), float_val=[1, 2, 3]),
            "Invalid number of values in tensor proto container - Expected: 4; Actual: 3; "
            "input name: x",
        ),
        (
            _proto(types_pb2.DT_FLOAT, (2, 2), tensor_content=b"\0" * 15),
            "Invalid content size of tensor proto - Expected: 16 bytes; Actual: 15 bytes; "
            "input name: x",
        ),
        (_proto(types_pb2.DT_STRING, (1,)), "String val is empty; input name: x"),
        (_proto(types_pb2.DT_UINT8, (1,), int_val=[300]), "out of range"),
        (_proto(types_pb2.DT_COMPLEX64, (1,), scomplex_val=[1, 2]), "DT_COMPLEX64"),
        (_proto(types_pb2.DT_FLOAT, (-1, 4)), "Invalid shape"),
        # more dimensions than numpy makes: once a ValueError out of reshape (INTERNAL)
        (
            _proto(types_pb2.DT_FLOAT, (1,) * 65, tensor_content=b"\0" * 4),
            "Invalid shape for input x: 65 dimensions, more than 32",
        ),
        (
            _proto(types_pb2.DT_STRING, (1,) * 65, string_val=[b"a"]),
            "Invalid shape for input x: 65 dimensions, more than 32",
        ),
    ],
)
def test_tensor_errors(proto: tensor_pb2.TensorProto, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message.replace("(", r"\(")):
        tfs_grpc.to_numpy(proto, "x")


def test_kserve_raw_bytes_and_contents() -> None:
    request = kfs.ModelInferRequest()
    request.inputs.add(name="s", datatype="BYTES", shape=[2])
    request.inputs.add(name="f", datatype="FP16", shape=[2])
    request.raw_input_contents.append(b"".join(struct.pack("<I", len(x)) + x for x in (b"ab", b"")))
    request.raw_input_contents.append(np.array([1, 2], np.float16).tobytes())
    got = kserve_grpc.decode_inputs(request)
    assert got["s"].tolist() == [b"ab", b""] and got["f"].tolist() == [1.0, 2.0]
    typed = kfs.ModelInferRequest()
    typed.inputs.add(name="i", datatype="INT8", shape=[1, 2]).contents.int_contents.extend([-1, 7])
    assert kserve_grpc.decode_inputs(typed)["i"].tolist() == [[-1, 7]]
    typed.inputs[0].contents.int_contents.append(3)
    with pytest.raises(InvalidInputError, match="Expected: 2; Actual: 3; input name: i"):
        kserve_grpc.decode_inputs(typed)
    half = kfs.ModelInferRequest()
    half.inputs.add(name="h", datatype="FP16", shape=[1])
    with pytest.raises(InvalidInputError, match="FP16 values cannot be sent"):
        kserve_grpc.decode_inputs(half)


@pytest.mark.parametrize(("datatype", "raw"), [("FP32", b"\0" * 4), ("BYTES", b"\1\0\0\0a")])
def test_kserve_shape_of_too_many_dimensions(datatype: str, raw: bytes) -> None:
    request = kfs.ModelInferRequest()
    request.inputs.add(name="x", datatype=datatype, shape=[1] * 65)
    request.raw_input_contents.append(raw)
    with pytest.raises(InvalidInputError, match="x: 65 dimensions, more than 32"):
        kserve_grpc.decode_inputs(request)


def test_kserve_versions() -> None:
    assert kserve_grpc.parse_version("") is None and kserve_grpc.parse_version("0") is None
    assert kserve_grpc.parse_version("12") == 12
    with pytest.raises(InvalidInputError):
        kserve_grpc.parse_version("-1")


class _Context:
    def __init__(self) -> None:
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise grpc.RpcError(details)


class _Servicer:
    @_rpc
    def Fails(self, request: Exception, context: Any) -> None:  # noqa: N802
        raise request


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (ModelNotFoundError("m"), grpc.StatusCode.NOT_FOUND),
        (InvalidInputError("bad"), grpc.StatusCode.INVALID_ARGUMENT),
        (RuntimeError("bug"), grpc.StatusCode.INTERNAL),
    ],
)
def test_error_mapping(error: Exception, code: grpc.StatusCode) -> None:
    context = _Context()
    with pytest.raises(grpc.RpcError):
        _Servicer().Fails(error, context)
    assert context.aborted is not None and context.aborted[0] is code
