"""A node whose state is a dataclass (dataclasses look the module up in sys.modules)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class State:
    offset: float


def initialize(params: dict[str, str]) -> State:
    return State(float(params.get("offset", "1")))


def inputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"x": ("FP32", [-1, 4])}


def outputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"y": ("FP32", [-1, 4])}


def execute(
    inputs: dict[str, np.ndarray], params: dict[str, str], state: State
) -> dict[str, np.ndarray]:
    return {"y": inputs["x"] + np.float32(state.offset)}
