"""A custom node library without inputs_info/outputs_info: its pipelines are rejected."""

from __future__ import annotations

import numpy as np


def execute(
    inputs: dict[str, np.ndarray], params: dict[str, str], state: object
) -> dict[str, np.ndarray]:
    return dict(inputs)
