"""What a servable accepts and returns, and the checks every request passes before inference.

Messages follow OVMS word for word where OVMS has one, so clients that match on them keep
working: "Invalid input shape - Expected: (1,3,224,224); Actual: (1,3,100,100); input name: x".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from core.errors import InvalidInputError
from core.tensors import dtypes
from core.tensors.dtypes import DType
from core.tensors.shapes import Dims, fits, format_actual, format_dims

Inputs = dict[str, np.ndarray]


@dataclass(frozen=True, slots=True)
class TensorSpec:
    name: str  # the served name (after mapping_config.json)
    dtype: DType
    dims: Dims
    layout: str = ""  # e.g. "NCHW"; "" when unknown

    @property
    def batch_index(self) -> int | None:
        if "N" in self.layout:
            return self.layout.index("N")
        return 0 if self.dims else None

    @property
    def image_layout(self) -> str | None:
        """NHWC or NCHW when this input can take jpeg/png images, else None. A 4-D input of
        unknown layout is NHWC, as OVMS's default layout `N...` is, unless its dims read as
        NCHW (1, 3 or 4 channels first)."""
        if len(self.dims) != 4 or self.dtype is dtypes.BYTES:
            return None
        if self.layout in ("NHWC", "NCHW"):
            return self.layout
        channels_last, channels_first = self.dims[3], self.dims[1]
        if channels_last[1] in (1, 3, 4) and channels_first[1] not in (1, 3, 4):
            return "NHWC"
        if channels_first[1] in (1, 3, 4):
            return "NCHW"
        return "NHWC"

    def check_shape(self, shape: tuple[int, ...]) -> None:
        if len(shape) != len(self.dims):
            raise InvalidInputError(
                f"Invalid number of shape dimensions - Expected: {format_dims(self.dims)}; "
                f"Actual: {format_actual(shape)}; input name: {self.name}"
            )
        batch = self.batch_index
        if batch is not None and not fits(self.dims[batch], shape[batch]):
            raise InvalidInputError(
                f"Invalid input batch size - Expected: {_format_dim(self.dims[batch])}; "
                f"Actual: {shape[batch]}; input name: {self.name}"
            )
        if not all(fits(dim, size) for dim, size in zip(self.dims, shape, strict=True)):
            raise InvalidInputError(
                f"Invalid input shape - Expected: {format_dims(self.dims)}; "
                f"Actual: {format_actual(shape)}; input name: {self.name}"
            )


def _format_dim(dim: tuple[int, int]) -> str:
    return format_dims((dim,))[1:-1]


def check_names(specs: Mapping[str, TensorSpec], inputs: Mapping[str, object]) -> None:
    """OVMS order: the number of inputs first, then each required name."""
    if len(inputs) != len(specs):
        missing = [name for name in specs if name not in inputs]
        extra = sorted(set(inputs) - set(specs))
        detail = (f"; missing input: {', '.join(missing)}" if missing else "") + (
            f"; unexpected input: {', '.join(extra)}" if extra else ""
        )
        raise InvalidInputError(
            f"Invalid number of inputs - Expected: {len(specs)}; Actual: {len(inputs)}"
            + detail[:300]
        )
    for name in specs:
        if name not in inputs:
            raise InvalidInputError(f"Missing input with specific name - Required input: {name}")


# Precision names as OVMS prints them (src/precision.cpp toString): I64, U8, STRING...
_OVMS_PRECISION = {
    "INT8": "I8",
    "INT16": "I16",
    "INT32": "I32",
    "INT64": "I64",
    "UINT8": "U8",
    "UINT16": "U16",
    "UINT32": "U32",
    "UINT64": "U64",
    "BYTES": "STRING",
}


def precision_name(dtype: DType) -> str:
    return _OVMS_PRECISION.get(dtype.kserve, dtype.kserve)


def check_precision(spec: TensorSpec, actual: DType) -> None:
    if actual is not spec.dtype:
        raise InvalidInputError(
            f"Invalid input precision - Expected: {precision_name(spec.dtype)}; "
            f"Actual: {precision_name(actual)}; input name: {spec.name}"
        )


def validate(specs: Mapping[str, TensorSpec], inputs: Inputs) -> Inputs:
    """Check names, dtypes and shapes against the signature (images are decoded before, by
    core.codecs.images; the request limits are checked before, by the data plane)."""
    check_names(specs, inputs)
    ready: Inputs = {}
    for name, spec in specs.items():
        array = inputs[name]
        check_precision(spec, dtypes.from_numpy(array.dtype))
        spec.check_shape(array.shape)
        ready[name] = array
    return ready
