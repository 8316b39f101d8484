"""Declares FP32 [-1,4] outputs a and b, then breaks the promise as params["mode"] says."""

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
    broken = {
        "float64": {"a": y.astype(np.float64)},
        "shape": {"a": np.zeros((1, 7), np.float32)},
        "list": {"a": y.tolist()},
        "missing": {},
    }[params["mode"]]
    return {"a": y, "b": y, **broken} if params["mode"] != "missing" else {"a": y}
