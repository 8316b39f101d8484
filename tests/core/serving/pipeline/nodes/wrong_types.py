"""Declares INT32 [-1,4] and FP32 [-1,5] outputs: neither fits the scaler's FP32 [-1,4]."""

from __future__ import annotations

import numpy as np


def inputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"x": ("FP32", [-1, 4])}


def outputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"ints": ("INT32", [-1, 4]), "wide": ("FP32", [-1, 5])}


def execute(
    inputs: dict[str, np.ndarray], params: dict[str, str], state: object
) -> dict[str, np.ndarray]:
    x = inputs["x"]
    return {"ints": x.astype(np.int32), "wide": np.pad(x, ((0, 0), (0, 1)))}
