"""Custom node: CTC greedy decoding of the recogniser's per-step character probabilities
into text, with the character set the recogniser carries in its rt_info
["framework", "character"] (one character a line; index 0 is the CTC blank and the last
index is a space, as PaddleOCR adds them).

Runs once over all the boxes (gather_from_node): drops the boxes whose text is empty or
whose confidence is below `min_score`; none left means no text (HTTP 204 / gRPC ABORTED).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np


class Charset(NamedTuple):
    characters: tuple[str, ...]  # by class index; [0] is the blank
    min_score: float


def initialize(params: dict[str, str]) -> Charset:
    return Charset(
        load_characters(_model_path(params.get("charset_model", ""))),
        float(params.get("min_score", "0.5")),
    )


def _model_path(value: str) -> Path:
    """The recogniser's IR; a relative path is taken from this file's folder."""
    if not value:
        raise ValueError("param charset_model (the recogniser's model.xml) is required")
    path = Path(value)
    return path if path.is_absolute() else Path(__file__).resolve().parent / path


def load_characters(model_xml: Path) -> tuple[str, ...]:
    import openvino as ov

    model = ov.Core().read_model(model_xml)
    if not model.has_rt_info(["framework", "character"]):
        raise ValueError(f"{model_xml.name} has no rt_info framework/character")
    listed = model.get_rt_info(["framework", "character"]).astype(str).split("\n")
    return ("", *listed, " ")


def inputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"probabilities": ("FP32", [-1, 1, -1, -1]), "boxes": ("INT32", [-1, 4])}


def outputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"texts": ("BYTES", [-1]), "boxes": ("INT32", [-1, 4]), "scores": ("FP32", [-1])}


def execute(
    inputs: dict[str, np.ndarray], params: dict[str, str], charset: Charset
) -> dict[str, np.ndarray]:
    probabilities, boxes = inputs["probabilities"][:, 0], inputs["boxes"]
    if probabilities.shape[-1] != len(charset.characters):
        raise ValueError(
            f"the recogniser scores {probabilities.shape[-1]} classes; its "
            f"character set has {len(charset.characters)}"
        )
    decoded = [greedy(steps, charset.characters) for steps in probabilities]
    keep = [
        i for i, (text, score) in enumerate(decoded) if text.strip() and score >= charset.min_score
    ]
    if not keep:
        _no_text()
    texts = np.array([decoded[i][0] for i in keep], dtype=object)  # str: served as BYTES
    return {
        "texts": texts,
        "boxes": boxes[keep].astype(np.int32),
        "scores": np.array([decoded[i][1] for i in keep], dtype=np.float32),
    }


def greedy(steps: np.ndarray, characters: tuple[str, ...]) -> tuple[str, float]:
    """[T,C] probabilities -> (text, mean probability of its characters): the best class per
    step, repeats merged, blanks dropped."""
    best = steps.argmax(axis=1)
    confidence = steps.max(axis=1)
    keep = best != 0
    keep[1:] &= best[1:] != best[:-1]
    if not keep.any():
        return "", 0.0
    text = "".join(characters[i] for i in best[keep])
    return text, float(confidence[keep].mean())


def _no_text() -> None:
    message = "No text found in the image"
    try:
        from core.errors import NoResultsError
    except ImportError:  # outside the server
        raise LookupError(message) from None
    raise NoResultsError(message)
