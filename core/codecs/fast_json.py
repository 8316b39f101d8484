"""The fast path for big numeric JSON bodies, when pysimdjson is installed.

The body is parsed by simdjson and each numeric array is copied straight into a numpy buffer
(`as_buffer`), with no Python float per element. It only ever answers for regular arrays of
plain numbers; anything else (ragged, mixed, strings, bools, nulls, big integers, invalid JSON)
returns None and the caller takes core.codecs.json's path, which owns every error message.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from core.codecs.json import EXACT_INT, fits

simdjson: Any
try:
    import simdjson
except ImportError:  # optional: the orjson path serves every request without it
    simdjson = None

T = TypeVar("T")
FAST_MIN_BYTES = 4096  # below this orjson is as fast and a fallback costs nothing
_pool: list[Any] = []
_pool_lock = threading.Lock()
_BUFFER = {"f": ("d", np.float64), "i": ("i", np.int64), "u": ("u", np.uint64)}
POOLED_PARSERS = 2  # parsers kept for reuse, each sized to the biggest body it parsed
POOLED_MAX_BYTES = 8 << 20  # a bigger body gets a parser of its own, freed after the request


def with_document(body: bytes, use: Callable[[Any], T]) -> T | None:
    """`use(simdjson document of body)`, or None when the body is small, simdjson is missing
    or the body is not valid JSON (use `loads`). `use` must return plain values, not the
    document's proxies: its parser goes back to a small pool for the next request (reusing one
    saves the ~3 ms of first-touch page faults a fresh parser costs on a 3 MB body)."""
    if simdjson is None or len(body) < FAST_MIN_BYTES:
        return None
    parser = _take_parser()
    try:
        try:
            doc = parser.parse(body)
        except RuntimeError:  # still referenced by an earlier document: use a fresh one
            parser = simdjson.Parser()
            doc = parser.parse(body)
    except (ValueError, RuntimeError, TypeError, UnicodeDecodeError):
        return None
    try:
        return use(doc)
    except (KeyError, TypeError, ValueError, RuntimeError, OverflowError, UnicodeDecodeError):
        return None  # anything the fast path did not foresee: the exact path answers it
    finally:
        del doc
        if len(body) <= POOLED_MAX_BYTES:
            _give_parser(parser)


def _take_parser() -> Any:
    with _pool_lock:
        if _pool:
            return _pool.pop()
    return simdjson.Parser()


def _give_parser(parser: Any) -> None:
    with _pool_lock:
        if len(_pool) < POOLED_PARSERS:
            _pool.append(parser)


def is_array(value: Any) -> bool:
    return simdjson is not None and isinstance(value, simdjson.Array)


def is_object(value: Any) -> bool:
    return simdjson is not None and isinstance(value, simdjson.Object)


def members(obj: Any) -> dict[str, Any] | None:
    """A simdjson Object's members (arrays and objects stay lazy proxies), or None when a key
    repeats (orjson keeps the last one) or holds a NUL character (simdjson cannot look such a
    key up): the exact path decodes those."""
    keys = list(obj.keys())
    if len(set(keys)) != len(keys) or any("\x00" in key for key in keys):
        return None
    return {key: obj[key] for key in keys}


def fast_numeric(value: Any, dtype: np.dtype) -> tuple[np.ndarray, int] | None:
    """A simdjson Array of plain numbers with a regular shape -> (array of that shape in
    `dtype`, how many JSON arrays it spans), else None. The caller compares the second number
    with the '[' count of the body (`brackets`), so an array nested where a number belongs
    (which as_buffer would flatten) sends the request to the exact path."""
    entry = _BUFFER.get(dtype.kind)
    if entry is None or not is_array(value):
        return None
    shape: list[int] = []
    probe = value
    while is_array(probe):
        if not len(probe):
            return None
        shape.append(len(probe))
        probe = probe[0]
    if not _regular(value, shape, 0):
        return None
    try:
        flat = np.frombuffer(value.as_buffer(of_type=entry[0]), dtype=entry[1])
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return None
    if flat.size != math.prod(shape):
        return None
    if (
        entry[0] == "d"
        and dtype.itemsize < 8
        and flat.size
        and not float(np.abs(flat).max()) < EXACT_INT
    ):
        return None
    if not fits(flat, dtype):  # the exact path reports it
        return None
    arrays = sum(math.prod(shape[:depth]) for depth in range(len(shape)))
    with np.errstate(over="ignore", invalid="ignore"):  # as numeric_array: a C cast
        return flat.astype(dtype, copy=False).reshape(shape), arrays


def _regular(value: Any, shape: list[int], depth: int) -> bool:
    if depth == len(shape) - 1:
        return True
    want = shape[depth + 1]
    for child in value:
        if not is_array(child) or len(child) != want or not _regular(child, shape, depth + 1):
            return False
    return True


def brackets(body: bytes) -> int:
    """How many '[' bytes the body holds (list openers and '[' inside strings)."""
    return int(np.count_nonzero(np.frombuffer(body, dtype=np.uint8) == ord("[")))


def plain(value: Any) -> tuple[Any, int]:
    """A small simdjson value -> (Python value, the '[' it accounts for in the text)."""
    if is_array(value):
        value = value.as_list()
    elif is_object(value):
        value = value.as_dict()
    return value, _count_brackets(value)


def _count_brackets(value: Any) -> int:
    if isinstance(value, list):
        return 1 + sum(_count_brackets(item) for item in value)
    if isinstance(value, dict):
        return sum(key.count("[") + _count_brackets(item) for key, item in value.items())
    if isinstance(value, str):
        return value.count("[")
    return 0
