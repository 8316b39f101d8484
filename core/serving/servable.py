"""What every servable is, one definition: the Servable protocol the data plane, the registry
and pipelines serve through, and the State / Status a version reports (OVMS's model states)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from core.tensors.spec import Inputs, TensorSpec


class State(enum.IntEnum):
    START = 10
    LOADING = 20
    AVAILABLE = 30
    UNLOADING = 40
    END = 50


@dataclass(frozen=True, slots=True)
class Status:
    state: State
    error_code: str = "OK"  # OK | UNKNOWN | FAILED_PRECONDITION, as OVMS reports them
    error_message: str = "OK"


class Servable(Protocol):
    """A model version or a pipeline: a signature, a status, and infer (validate and run)."""

    name: str
    version: int
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    status: Status

    @property
    def available(self) -> bool: ...

    @property
    def color_format(self) -> str: ...

    def infer(self, inputs: Inputs) -> dict[str, np.ndarray]: ...
