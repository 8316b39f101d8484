"""The one in-server form of a string tensor (an object array of bytes) and the encoders that
read it, for every way a string array arrives: object str/bytes, numpy unicode and bytes."""

from __future__ import annotations

import struct

import numpy as np
import orjson
import pytest

from core.codecs import binary, tfs_grpc
from core.codecs import json as json_codec
from core.tensors import dtypes
from protos.gen.tensorflow.core.framework import tensor_pb2, types_pb2


def _objects(items: list[object], shape: tuple[int, ...]) -> np.ndarray:
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array.reshape(shape)


SAME_STRINGS = [
    pytest.param(np.array([["ab", "é"], ["", "z"]]), id="unicode"),
    pytest.param(np.array([[b"ab", "é".encode()], [b"", b"z"]]), id="bytes"),
    pytest.param(_objects(["ab", "é", "", "z"], (2, 2)), id="object-str"),
    pytest.param(_objects([b"ab", "é".encode(), b"", b"z"], (2, 2)), id="object-bytes"),
]
EXPECTED = [[b"ab", "é".encode()], [b"", b"z"]]


@pytest.mark.parametrize("array", SAME_STRINGS)
def test_every_string_form_becomes_object_bytes(array: np.ndarray) -> None:
    assert dtypes.is_strings(array)
    out = dtypes.as_bytes_array(array)
    assert out.dtype == object and out.shape == (2, 2)
    assert out.tolist() == EXPECTED
    assert dtypes.to_ov_strings(array).tolist() == EXPECTED


@pytest.mark.parametrize("array", SAME_STRINGS)
def test_every_string_form_encodes_the_same_on_every_api(array: np.ndarray) -> None:
    assert orjson.loads(json_codec.dumps({"y": array})) == {"y": [["ab", "é"], ["", "z"]]}
    framed = b"".join(struct.pack("<I", len(item)) + item for row in EXPECTED for item in row)
    assert binary.to_binary(array) == framed
    proto = tensor_pb2.TensorProto()
    tfs_grpc.fill_proto(array, proto)
    assert proto.dtype == types_pb2.DT_STRING
    assert list(proto.string_val) == [item for row in EXPECTED for item in row]


def test_non_utf8_is_b64_and_named_bytes_always_are() -> None:
    array = _objects([b"\xff", b"ok"], (2,))
    assert orjson.loads(json_codec.dumps(array)) == [{"b64": "/w=="}, "ok"]
    named = json_codec.named_bytes_as_b64({"out_bytes": array, "out": array})
    assert orjson.loads(json_codec.dumps(dict(named))) == {
        "out_bytes": [{"b64": "/w=="}, {"b64": "b2s="}],
        "out": [{"b64": "/w=="}, "ok"],
    }


def test_elements_that_are_not_strings_are_refused() -> None:
    with pytest.raises(TypeError, match="not int"):
        dtypes.as_bytes_array(_objects([b"a", 3], (2,)))
    assert not dtypes.is_strings(np.zeros(2, np.float32))
