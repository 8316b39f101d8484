"""Demultiplexer: x [1,4] -> items [count,1,4], item i = x * (i + 1)."""

from __future__ import annotations

import numpy as np


def inputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"x": ("FP32", [1, 4])}


def outputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"items": ("FP32", [int(params["count"]), 1, 4])}


def execute(
    inputs: dict[str, np.ndarray], params: dict[str, str], state: object
) -> dict[str, np.ndarray]:
    count = int(params["count"])
    return {"items": np.stack([inputs["x"] * (i + 1) for i in range(count)])}
