"""Explicit limits, checked before anything is allocated.

A `Limits` is a value: the App takes it from Settings and hands it to its data plane, which
passes it to the codecs and checks decoded inputs with it. No module state: two Apps in one
process each apply their own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from core.errors import InvalidInputError


@dataclass(frozen=True, slots=True)
class Limits:
    max_tensor_elements: int = 64 * 1024 * 1024
    max_tensor_bytes: int = 1024 * 1024 * 1024
    max_image_pixels: int = 64 * 1024 * 1024


DEFAULT = Limits()
MAX_DIMS = 32  # the most dimensions an array has in numpy 1.x (2.x allows 64); no model takes more


def check_shape(limits: Limits, shape: Sequence[object], name: str, itemsize: int = 1) -> int:
    """Element count of a declared shape; too many elements or bytes is a 400, before any
    array of that size exists; so is a shape of more dimensions than numpy can make."""
    if len(shape) > MAX_DIMS:
        raise InvalidInputError(
            f"Invalid shape for input {name}: {len(shape)} dimensions, more than {MAX_DIMS}"
        )
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


def check_inputs(
    limits: Limits, names: Mapping[str, object], inputs: Mapping[str, np.ndarray]
) -> None:
    """Every decoded input a servable takes (`names`: its signature) within the limits; the
    others are the signature check's to refuse."""
    for name in names:
        array = inputs.get(name)
        if array is not None:
            check_shape(limits, array.shape, name, array.itemsize)
