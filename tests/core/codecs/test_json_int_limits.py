"""Exact integer range checks on every JSON path: each integer type takes its own limits
(UINT64 18446744073709551615, INT64 -9223372036854775808) exactly, also beside an integral
float, and refuses one past them (2**64, -2**63 - 1) with OVMS-style 400 text, in TFS rows,
TFS columns and KServe JSON, small bodies and big ones (the simdjson path) alike."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from core.codecs import fast_json, kserve_rest, tfs_rest
from core.errors import InvalidInputError
from core.tensors import dtypes
from core.tensors.shapes import ANY
from core.tensors.spec import TensorSpec

INTEGERS = ["INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"]
ROWS_BIG = 600  # rows of a few numbers: a body well over the fast path's threshold


def _limits(datatype: str) -> tuple[int, int]:
    info = np.iinfo(dtypes.BY_KSERVE[datatype].numpy)
    return int(info.min), int(info.max)


def _decode(route: str, datatype: str, rows: list[list[Any]]) -> np.ndarray:
    spec = {"x": TensorSpec("x", dtypes.BY_KSERVE[datatype], (ANY, ANY))}
    if route == "kserve":
        doc = {
            "inputs": [
                {
                    "name": "x",
                    "shape": [len(rows), len(rows[0])],
                    "datatype": datatype,
                    "data": rows,
                }
            ]
        }
        return kserve_rest.decode(json.dumps(doc).encode(), None, spec).inputs["x"]
    doc = {"instances": rows} if route == "tfs_row" else {"inputs": {"x": rows}}
    return tfs_rest.decode(json.dumps(doc).encode(), spec)[0]["x"]


def _body_rows(row: list[Any], big: bool) -> list[list[Any]]:
    return [[0] * len(row)] * (ROWS_BIG - 1) + [row] if big else [row]


ROUTES = pytest.mark.parametrize("route", ["tfs_row", "tfs_column", "kserve"])
SIZES = pytest.mark.parametrize("big", [False, True], ids=["small", "big"])
TYPES = pytest.mark.parametrize("datatype", INTEGERS)


@ROUTES
@SIZES
@TYPES
def test_each_type_takes_its_limits_exactly(route: str, big: bool, datatype: str) -> None:
    low, high = _limits(datatype)
    rows = _body_rows([low, high, 1], big)
    got = _decode(route, datatype, rows)
    assert got.dtype == dtypes.BY_KSERVE[datatype].numpy
    assert got[-1].tolist() == [low, high, 1]


@ROUTES
@SIZES
@TYPES
def test_limits_beside_an_integral_float_stay_exact(route: str, big: bool, datatype: str) -> None:
    """numpy makes float64 of [max, 1.0]; float64 rounds 2**64 - 1 up to 2**64."""
    low, high = _limits(datatype)
    got = _decode(route, datatype, _body_rows([low, high, 1.0], big))
    assert got[-1].tolist() == [low, high, 1]


@ROUTES
@SIZES
@TYPES
@pytest.mark.parametrize("past", ["below", "above", "above_with_float"])
def test_one_past_a_limit_is_a_400(route: str, big: bool, datatype: str, past: str) -> None:
    low, high = _limits(datatype)
    row = {
        "below": [low - 1, high, 1],
        "above": [low, high + 1, 1],
        "above_with_float": [low, high + 1, 1.0],
    }[past]
    with pytest.raises(InvalidInputError) as caught:
        _decode(route, datatype, _body_rows(row, big))
    assert (
        caught.value.message == f"Invalid value for input x: expected integers from {low} to {high}"
    )


@pytest.mark.parametrize("datatype", ["INT64", "UINT64"])
@pytest.mark.parametrize("value", [2**53 + 2.0, -(2.0**60), 1.5, 2.0**64, -(2**63) - 1])
def test_floats_a_float64_cannot_tell_apart_are_refused(datatype: str, value: float) -> None:
    """A float beyond 2**53 no longer says which integer was written; orjson turns an
    integer literal beyond 64 bits into such a float (-2**63 - 1 reads as -2.0**63, which
    a float check would take as INT64's minimum)."""
    low, high = _limits(datatype)
    with pytest.raises(InvalidInputError, match=f"expected integers from {low} to {high}"):
        _decode("kserve", datatype, [[1, value]])


def test_big_bodies_here_take_the_fast_path() -> None:
    """The 'big' cases above are over the threshold, so both decoders are exercised."""
    rows = _body_rows([-128, 127, 1], True)
    assert len(json.dumps({"instances": rows})) > fast_json.FAST_MIN_BYTES
