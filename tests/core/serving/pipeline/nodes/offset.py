"""a = y + offset, b = y: feeds the two_inputs model. Writes "init"/"deinit" lines to
params["journal"] (when given) so tests can see the lifecycle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def initialize(params: dict[str, str]) -> dict[str, Any]:
    _journal(params, "init")
    return {"offset": np.float32(params.get("offset", "1")), "params": params}


def inputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"y": ("FP32", [-1, 4])}


def outputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"a": ("FP32", [-1, 4]), "b": ("FP32", [-1, 4])}


def execute(
    inputs: dict[str, np.ndarray], params: dict[str, str], state: dict[str, Any]
) -> dict[str, np.ndarray]:
    y = inputs["y"]
    return {"a": y + state["offset"], "b": y}


def deinitialize(state: dict[str, Any]) -> None:
    _journal(state["params"], "deinit")


def _journal(params: dict[str, str], line: str) -> None:
    if params.get("journal"):
        with Path(params["journal"]).open("a") as out:
            out.write(f"{line} {params.get('offset', '1')}\n")
