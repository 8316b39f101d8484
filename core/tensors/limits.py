"""Explicit limits, checked before anything is allocated.

One process-wide `Limits`, set from Settings when the App is built; codecs read `current()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.errors import InvalidInputError


@dataclass(frozen=True, slots=True)
class Limits:
    max_tensor_elements: int = 64 * 1024 * 1024
    max_tensor_bytes: int = 1024 * 1024 * 1024
    max_image_pixels: int = 64 * 1024 * 1024


_current = Limits()


def configure(limits: Limits) -> None:
    global _current
    _current = limits


def current() -> Limits:
    return _current


def check_shape(shape: Sequence[object], name: str, itemsize: int = 1) -> int:
    """Element count of a declared shape; too many elements or bytes is a 400, before any
    array of that size exists."""
    limits = _current
    count = 1
    for dim in shape:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 0:
            raise InvalidInputError(f"Invalid shape {list(shape)[:10]} for input {name}")
        count *= dim
        if count > limits.max_tensor_elements or dim > limits.max_tensor_elements:
            # the dim too: [0, 2**62] has no elements, but numpy cannot even shape it
            raise InvalidInputError(
                f"Input {name} declares more than {limits.max_tensor_elements} elements "
                f"(the limit); shape {list(shape)[:10]}"
            )
    if count * itemsize > limits.max_tensor_bytes:
        raise InvalidInputError(
            f"Input {name} of {count * itemsize} bytes exceeds the limit of "
            f"{limits.max_tensor_bytes} bytes"
        )
    return count
