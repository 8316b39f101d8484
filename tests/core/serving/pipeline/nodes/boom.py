"""Passes y through, but raises when y[0, 0] is negative."""

from __future__ import annotations

import numpy as np


def inputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"y": ("FP32", [-1, 4])}


def outputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"a": ("FP32", [-1, 4]), "b": ("FP32", [-1, 4])}


def execute(
    inputs: dict[str, np.ndarray], params: dict[str, str], state: object
) -> dict[str, np.ndarray]:
    y = inputs["y"]
    if y[0, 0] < 0:
        raise ValueError("negative input")
    return {"a": y, "b": y}
