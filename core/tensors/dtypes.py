"""Dtype tables: numpy <-> OpenVINO element type <-> TF DataType <-> KServe v2 datatype.

One row per type; every lookup table is derived from ROWS so the four views cannot drift.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.errors import InvalidInputError


@dataclass(frozen=True, slots=True)
class DType:
    kserve: str  # KServe v2 datatype, also OVMS's precision name in error messages
    numpy: np.dtype
    tf: str  # TF DataType enum name
    tf_enum: int
    ov: str  # openvino Type name (str(ov.Type.f32) == "f32" via get_type_name)


ROWS = (
    DType("BOOL", np.dtype(np.bool_), "DT_BOOL", 10, "boolean"),
    DType("UINT8", np.dtype(np.uint8), "DT_UINT8", 4, "u8"),
    DType("UINT16", np.dtype(np.uint16), "DT_UINT16", 17, "u16"),
    DType("UINT32", np.dtype(np.uint32), "DT_UINT32", 22, "u32"),
    DType("UINT64", np.dtype(np.uint64), "DT_UINT64", 23, "u64"),
    DType("INT8", np.dtype(np.int8), "DT_INT8", 6, "i8"),
    DType("INT16", np.dtype(np.int16), "DT_INT16", 5, "i16"),
    DType("INT32", np.dtype(np.int32), "DT_INT32", 3, "i32"),
    DType("INT64", np.dtype(np.int64), "DT_INT64", 9, "i64"),
    DType("FP16", np.dtype(np.float16), "DT_HALF", 19, "f16"),
    DType("FP32", np.dtype(np.float32), "DT_FLOAT", 1, "f32"),
    DType("FP64", np.dtype(np.float64), "DT_DOUBLE", 2, "f64"),
    DType("BYTES", np.dtype(np.object_), "DT_STRING", 7, "string"),
)


BY_KSERVE = {row.kserve: row for row in ROWS}
BY_TF = {row.tf: row for row in ROWS}
BY_TF_ENUM = {row.tf_enum: row for row in ROWS}
BY_OV = {row.ov: row for row in ROWS}
BY_NUMPY = {row.numpy: row for row in ROWS}
BYTES = BY_KSERVE["BYTES"]


def from_ov(type_name: str) -> DType:
    try:
        return BY_OV[type_name]
    except KeyError:
        raise InvalidInputError(f"Unsupported OpenVINO element type: {type_name}") from None


def from_kserve(datatype: str) -> DType:
    try:
        return BY_KSERVE[datatype]
    except KeyError:
        raise InvalidInputError(f"Unsupported datatype: {datatype}") from None


def from_numpy(dtype: np.dtype) -> DType:
    if dtype.kind in "SUO":
        return BYTES
    try:
        return BY_NUMPY[dtype]
    except KeyError:
        raise InvalidInputError(f"Unsupported numpy dtype: {dtype}") from None


# -- string tensors ----------------------------------------------------------------------------
# Inside the server a string tensor is an object array of bytes, whatever carried it in: the
# codecs decode to it, every encoder reads it, and custom nodes receive it. Arrays of Python str,
# numpy unicode ("U") or bytes ("S") that a custom node or OpenVINO returns are normalised here.


def is_strings(array: np.ndarray) -> bool:
    return array.dtype.kind in "SUO"


def as_bytes_array(array: np.ndarray) -> np.ndarray:
    """A string-like array -> an object array of bytes, same shape (str is UTF-8 encoded).

    Raises TypeError for an element that is neither str nor bytes."""
    if array.dtype.kind == "S":
        return array.astype(object)
    out = np.empty(array.shape, dtype=object)
    out.reshape(-1)[:] = [_to_bytes(item) for item in array.reshape(-1)]
    return out


def _to_bytes(item: object) -> bytes:
    if isinstance(item, bytes):
        return bytes(item)
    if isinstance(item, str):
        return item.encode("utf-8")
    raise TypeError(f"string tensors hold str or bytes, not {type(item).__name__}")


def to_ov_strings(array: np.ndarray) -> np.ndarray:
    """A string tensor as the OpenVINO bindings take it: numpy bytes ("S"), same shape.

    numpy "S" arrays cannot hold trailing NUL bytes of an element; OpenVINO's Python API
    converts through them both ways, so an element's trailing NULs do not reach the model
    (nor come back from it)."""
    if array.dtype.kind == "S":
        return array
    return as_bytes_array(array).astype(np.bytes_)
