"""batch_size "auto" and shape "auto", as OVMS serves them: a version is compiled for static
shapes (the model's own at first), and a request of another batch (or, for shape auto, another
shape) has the version reloaded for it before it is answered.

`Fit` is what one compiled version was reshaped to beyond its config; `needed` says which fit a
request needs, or None when the version takes it as it is (or no reload would make it fit: then
validation answers with the usual shape error).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.tensors import dtypes
from core.tensors.shapes import AUTO, Dims, fits


@dataclass(frozen=True, slots=True)
class Fit:
    batch: int | None = None  # batch_size auto: the batch compiled for; None: the model's own
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()  # shape auto: served name -> dims

    def shape(self, name: str) -> tuple[int, ...] | None:
        return dict(self.shapes).get(name)

    def describe(self) -> str:
        parts = [f"batch {self.batch}"] if self.batch is not None else []
        parts += [f"{name} ({','.join(map(str, dims))})" for name, dims in self.shapes]
        return ", ".join(parts)


def uses_auto(config: Any) -> bool:
    shape = config.shape
    return (
        config.batch_size == AUTO
        or shape == AUTO
        or (isinstance(shape, dict) and AUTO in shape.values())
    )


def shape_auto(config: Any, served: str, real: str) -> bool:
    """Is this input's shape "auto"? A per-input map may name it by served or model name."""
    shape = config.shape
    if isinstance(shape, dict):
        return shape.get(served, shape.get(real)) == AUTO
    return bool(shape == AUTO)


def needed(version: Any, inputs: Mapping[str, np.ndarray]) -> Fit | None:
    """The fit `inputs` need from an auto `version`, or None when it needs no reload."""
    config, current = version.config, version.fit
    shapes: dict[str, tuple[int, ...]] = {}
    batch: int | None = None
    for name, array in inputs.items():
        spec = version.inputs.get(name)
        if spec is None or spec.dtype is dtypes.BYTES:
            continue
        shape = tuple(int(d) for d in array.shape)
        real = version._input_ports.get(name, name)
        if shape_auto(config, name, real):
            if not _fits(spec.dims, shape) and all(d > 0 for d in shape):
                shapes[name] = shape
        elif config.batch_size == AUTO and not _shaped(config, name, real):
            wanted = _other_batch(spec.dims, spec.batch_index, shape)
            batch = wanted if wanted is not None else batch
    if not shapes and batch is None:
        return None
    merged = {**dict(current.shapes), **shapes}
    return Fit(batch if batch is not None else current.batch, tuple(sorted(merged.items())))


def _shaped(config: Any, served: str, real: str) -> bool:
    """Does the config give this input a shape (which wins over batch_size)?"""
    shape = config.shape
    return shape is not None and (not isinstance(shape, dict) or served in shape or real in shape)


def _fits(dims: Dims, shape: tuple[int, ...]) -> bool:
    return len(dims) == len(shape) and all(fits(d, s) for d, s in zip(dims, shape, strict=True))


def _other_batch(dims: Dims, index: int | None, shape: tuple[int, ...]) -> int | None:
    """The request's batch when only the batch keeps it from fitting, else None."""
    if index is None or len(dims) != len(shape) or shape[index] <= 0:
        return None
    if fits(dims[index], shape[index]):
        return None
    others = all(fits(d, s) for i, (d, s) in enumerate(zip(dims, shape, strict=True)) if i != index)
    return shape[index] if others else None
