"""Gather: ys [N,1,4] (one per demultiplexed item) -> their sum [1,4] and N."""

from __future__ import annotations

import numpy as np


def inputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"ys": ("FP32", [-1, 1, 4])}


def outputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"total": ("FP32", [1, 4]), "count": ("INT32", [1])}


def execute(
    inputs: dict[str, np.ndarray], params: dict[str, str], state: object
) -> dict[str, np.ndarray]:
    ys = inputs["ys"]
    return {"total": ys.sum(axis=0), "count": np.array([len(ys)], dtype=np.int32)}
