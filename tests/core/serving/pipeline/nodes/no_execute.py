"""A custom node library without execute(): rejected at load."""

from __future__ import annotations


def inputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"y": ("FP32", [-1, 4])}
