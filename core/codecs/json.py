"""The JSON codec of tensors shared by TF Serving's and KServe's REST APIs: parsing, JSON
values -> numpy arrays (numbers with exact integer ranges, strings, {"b64": ...} bytes), and
arrays -> JSON (NaN and infinities as TF Serving writes them). Big numeric bodies take
core.codecs.fast_json first; everything it declines comes here, which owns every error message.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson

from core.errors import InvalidInputError, JsonInvalidError
from core.tensors import dtypes
from core.tensors.limits import MAX_DIMS
from core.tensors.spec import TensorSpec

NUMPY_OPT = orjson.OPT_SERIALIZE_NUMPY
EXACT_INT = float(2**53)  # int literals beyond this may round twice via float64


def loads(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise JsonInvalidError(f"The file is not valid json - {exc}") from None


def dumps(doc: Any) -> bytes:
    return orjson.dumps(doc, option=NUMPY_OPT, default=_default)


def json_tensor(value: Any) -> Any:
    """A tensor (or one of its items) as `dumps` should write it. JSON has no NaN or
    infinities and orjson writes them as null (which the KServe schema refuses and a client
    reads back as NaN even for +inf); a float tensor holding one is written with the
    literals TF Serving's REST API uses, NaN, Infinity and -Infinity, which Python's json
    and tritonclient read back as the same value. Binary output stays the lossless choice."""
    array = np.asarray(value)
    if array.dtype.kind != "f":
        return value
    finite = np.isfinite(array)
    if finite.all():
        return value
    if array.ndim == 0:
        return orjson.Fragment(_LITERALS[_literal_index(array)])
    nulls = orjson.dumps(np.ascontiguousarray(array), option=NUMPY_OPT).split(b"null")
    words = [_LITERALS[i] for i in _literal_index(array[~finite]).tolist()]
    text = bytearray(nulls[0])
    for word, rest in zip(words, nulls[1:], strict=True):
        text += word + rest
    return orjson.Fragment(bytes(text))


_LITERALS = (b"NaN", b"Infinity", b"-Infinity")


def _literal_index(values: np.ndarray) -> Any:
    """0 for NaN, 1 for +inf, 2 for -inf, element-wise."""
    return np.where(np.isnan(values), 0, np.where(values > 0, 1, 2))


def _default(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "SU":  # numpy strings: as the object arrays of bytes
            value = dtypes.as_bytes_array(value)
        if value.dtype == object:
            return (
                [_text(item) for item in value.ravel()]
                if value.ndim <= 1
                else [_default(row) for row in value]
            )
        if value.ndim == 0:
            return value.item()
        return orjson.Fragment(orjson.dumps(np.ascontiguousarray(value), option=NUMPY_OPT))
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes):
        return _text(value)
    raise TypeError(f"cannot serialize {type(value).__name__}")


def _text(item: Any) -> Any:
    if isinstance(item, bytes):
        try:
            return item.decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(item).decode("ascii")}
    return item


def named_bytes_as_b64(outputs: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
    """TF Serving's JSON rule for string outputs whose name ends with "_bytes": every element
    is written as {"b64": ...}, valid UTF-8 or not (other string outputs are written as text,
    and as {"b64": ...} only where they are not UTF-8)."""
    named = [
        name
        for name, value in outputs.items()
        if name.endswith("_bytes") and dtypes.is_strings(value)
    ]
    if not named:
        return outputs
    return {
        name: _b64_objects(value) if name in named else value for name, value in outputs.items()
    }


def _b64_objects(value: np.ndarray) -> np.ndarray:
    flat = dtypes.as_bytes_array(value).reshape(-1)
    out = np.empty(value.shape, dtype=object)
    out.reshape(-1)[:] = [{"b64": base64.b64encode(item).decode("ascii")} for item in flat]
    return out


def is_binary_leaf(value: Any) -> bool:
    """True for TFS {"b64": "..."} objects and plain strings: both make a bytes tensor."""
    while isinstance(value, list) and value:
        value = value[0]
    return isinstance(value, str) or (isinstance(value, dict) and "b64" in value)


def b64_leaf(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str):
        try:
            return base64.b64decode(value["b64"], validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInputError("Decode Base64 to string error") from None
    raise InvalidInputError('Binary values must be {"b64": "<base64>"} objects only')


def bytes_array(value: Any, where: str) -> np.ndarray:
    """Nested lists of b64 objects / strings -> an object array of bytes, shape preserved."""
    if not isinstance(value, list):
        value = [value]
    if all(type(item) is str for item in value):  # the common case: a flat list of text
        flat = np.empty(len(value), dtype=object)
        flat[:] = [item.encode("utf-8") for item in value]
        return flat

    array = np.empty(_nested_shape(value, where), dtype=object)
    array.reshape(-1)[:] = [b64_leaf(item) for item in flatten(value)]
    return array


def _nested_shape(value: Any, where: str) -> tuple[int, ...]:
    """The shape of regular nested lists; ragged nesting, or more dimensions than an array
    can have, is OVMS's "Not valid ndarray" (checked without recursing deeper than that)."""
    shape: list[int] = []
    probe = value
    while isinstance(probe, list):
        if len(shape) == MAX_DIMS:
            raise InvalidInputError(
                f"{where}. Not valid ndarray detected: more than {MAX_DIMS} dimensions"
            )
        shape.append(len(probe))
        probe = probe[0] if probe else None

    def check(item: Any, depth: int) -> None:
        if depth == len(shape):
            if isinstance(item, list):
                raise InvalidInputError(f"{where}. Not valid ndarray detected")
            return
        if not isinstance(item, list) or len(item) != shape[depth]:
            raise InvalidInputError(f"{where}. Not valid ndarray detected")
        for child in item:
            check(child, depth + 1)

    check(value, 0)
    return tuple(shape)


def flatten(value: Any) -> list[Any]:
    """The leaves of nested lists, in order; iterative, as a client picks the depth."""
    if not isinstance(value, list):
        return [value]
    out: list[Any] = []
    stack = [iter(value)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            out.append(item)
        else:
            stack.pop()
    return out


def numeric_array(value: Any, spec: TensorSpec, where: str) -> np.ndarray:
    """JSON numbers (nested lists) -> an array of the spec's dtype; ragged or non-numeric is a
    400 with `where` (OVMS: "Could not parse instance content. Not valid ndarray detected")."""
    try:
        array = np.asarray(value)
    except (ValueError, TypeError):
        raise InvalidInputError(f"{where}. Not valid ndarray detected") from None
    if array.dtype.kind not in "biuf" or array.dtype == object:
        raise InvalidInputError(
            f"{where}. Not valid ndarray detected; input name: {spec.name}; expected numbers"
        )
    if spec.dtype is dtypes.BYTES:
        raise InvalidInputError(f"Input {spec.name} takes strings or b64 values, not numbers")
    return cast_numbers(value, array, spec.dtype.numpy, spec.name)


def cast_numbers(value: Any, array: np.ndarray, dtype: np.dtype, name: str) -> np.ndarray:
    """JSON numbers (`value`, already `array` = np.asarray(value)) -> `dtype`. A float input
    takes any number (1e300 -> inf in FP32, as a C cast); an integer input only integers it
    can hold, checked exactly (18446744073709551615 is a UINT64, 2**64 is not), as TF Serving
    and OVMS check each value's JSON type: -1 for UINT8 or 1.5 for INT32 is a 400, not a
    silent 255 or 1. An integral float (3.0) counts as its integer up to 2**53, beyond which
    a float no longer tells which integer was written."""
    if dtype.kind in "iu" and array.dtype.kind == "f":
        # numpy made float64 of a mix of ints and floats (or of ints no int64/uint64 holds):
        # float64 rounds big ints, so each value is checked as the JSON parser gave it
        return _exact_integers(value, dtype, name).reshape(array.shape)
    if not fits(array, dtype):
        raise _range_error(dtype, name)
    with np.errstate(over="ignore", invalid="ignore"):
        return array.astype(dtype, copy=False)


def _exact_integers(value: Any, dtype: np.dtype, name: str) -> np.ndarray:
    info = np.iinfo(dtype)
    exact: list[int] = []
    for item in flatten(value):
        if isinstance(item, float):
            if not (item.is_integer() and abs(item) <= EXACT_INT):
                raise _range_error(dtype, name)
            item = int(item)
        if not info.min <= item <= info.max:
            raise _range_error(dtype, name)
        exact.append(int(item))
    return np.array(exact, dtype=dtype)


def _range_error(dtype: np.dtype, name: str) -> InvalidInputError:
    info = np.iinfo(dtype)
    return InvalidInputError(
        f"Invalid value for input {name}: expected integers from {info.min} to {info.max}"
    )


def fits(array: np.ndarray, dtype: np.dtype) -> bool:
    """Every value of an integer (or bool) `array` is one that integer `dtype` holds (True
    when `dtype` is not an integer type)."""
    if dtype.kind not in "iu" or array.dtype.kind not in "biu" or not array.size:
        return True
    info = np.iinfo(dtype)
    return int(array.min()) >= info.min and int(array.max()) <= info.max
