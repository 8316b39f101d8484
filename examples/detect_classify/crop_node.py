"""Custom node: keep the image quadrants whose detector score passes a threshold, crop each,
and upscale it 2x to the classifier's input size. One output item per kept quadrant
(the pipeline demultiplexes them, so the classifier runs once per crop)."""

from __future__ import annotations

import numpy as np


def initialize(params: dict[str, str]) -> dict[str, float]:
    return {"threshold": float(params.get("threshold", "0"))}


def inputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"image": ("FP32", [1, 3, 224, 224]), "scores": ("FP32", [1, 4])}


def outputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"crops": ("FP32", [-1, 1, 3, 224, 224]), "boxes": ("INT32", [-1, 4])}


def execute(
    inputs: dict[str, np.ndarray], params: dict[str, str], state: dict[str, float]
) -> dict[str, np.ndarray]:
    image, scores = inputs["image"], inputs["scores"][0]
    crops, boxes = [], []
    for index in np.flatnonzero(scores > state["threshold"]):
        top, left = 112 * (index // 2), 112 * (index % 2)
        crop = image[:, :, top : top + 112, left : left + 112]
        crops.append(crop.repeat(2, axis=2).repeat(2, axis=3))
        boxes.append([left, top, left + 112, top + 112])
    return {
        "crops": np.asarray(crops, dtype=np.float32).reshape(-1, 1, 3, 224, 224),
        "boxes": np.asarray(boxes, dtype=np.int32).reshape(-1, 4),
    }


def deinitialize(state: dict[str, float]) -> None:
    state.clear()
