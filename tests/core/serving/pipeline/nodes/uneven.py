"""A demultiplexer whose two outputs disagree on the item count (2 and 3)."""

from __future__ import annotations

import numpy as np


def inputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"x": ("FP32", [1, 4])}


def outputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"p": ("FP32", [-1, 1, 4]), "q": ("FP32", [-1, 1, 4])}


def execute(
    inputs: dict[str, np.ndarray], params: dict[str, str], state: object
) -> dict[str, np.ndarray]:
    x = inputs["x"]
    return {"p": np.stack([x, x]), "q": np.stack([x, x, x])}
