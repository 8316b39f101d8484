"""Demultiplexer: x [1,4] -> items [count,1,4], item i = x * (i + 1). Writes "init"/"deinit"
lines to params["journal"] (when given) so tests can see the lifecycle."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def initialize(params: dict[str, str]) -> dict[str, str]:
    _journal(params, "init")
    return params


def deinitialize(state: dict[str, str]) -> None:
    _journal(state, "deinit")


def _journal(params: dict[str, str], line: str) -> None:
    if params.get("journal"):
        with Path(params["journal"]).open("a") as out:
            out.write(f"{line}\n")


def inputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"x": ("FP32", [1, 4])}


def outputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"items": ("FP32", [int(params["count"]), 1, 4])}


def execute(
    inputs: dict[str, np.ndarray], params: dict[str, str], state: object
) -> dict[str, np.ndarray]:
    count = int(params["count"])
    return {"items": np.stack([inputs["x"] * (i + 1) for i in range(count)])}
