"""Helpers shared by the JSON codecs: parsing, value -> numpy, numpy -> JSON."""

from __future__ import annotations

import base64
import binascii
from typing import Any

import numpy as np
import orjson

from core import tensors
from core.errors import InvalidInputError, JsonInvalidError
from core.signature import TensorSpec

NUMPY_OPT = orjson.OPT_SERIALIZE_NUMPY


def loads(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise JsonInvalidError(f"The file is not valid json - {exc}") from None


def dumps(doc: Any) -> bytes:
    return orjson.dumps(doc, option=NUMPY_OPT, default=_default)


def _default(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return [_text(item) for item in value.ravel()] if value.ndim <= 1 \
                else [_default(row) for row in value]
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

    def walk(item: Any) -> Any:
        return [walk(x) for x in item] if isinstance(item, list) else b64_leaf(item)

    leaves = walk(value)
    array = np.empty(_nested_shape(leaves, where), dtype=object)
    flat = array.reshape(-1)
    flat[:] = _flatten(leaves)
    return array


def _nested_shape(value: Any, where: str) -> tuple[int, ...]:
    """The shape of regular nested lists; ragged nesting is OVMS's "Not valid ndarray"."""
    shape: list[int] = []
    probe = value
    while isinstance(probe, list):
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


def _flatten(value: Any) -> list[Any]:
    if not isinstance(value, list):
        return [value]
    out: list[Any] = []
    for item in value:
        out.extend(_flatten(item))
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
    if spec.dtype is tensors.BYTES:
        raise InvalidInputError(f"Input {spec.name} takes strings or b64 values, not numbers")
    with np.errstate(over="ignore", invalid="ignore"):  # 1e300 -> inf in FP32, as a C cast
        return array.astype(spec.dtype.numpy, copy=False)
