"""Custom node: DB post-processing of the detector's text probability map, then one
recogniser-ready crop per text box (the pipeline demultiplexes them).

Steps, as PaddleOCR's DBPostProcess does them (numpy and Pillow only):
threshold the map, dilate 2x2, find 8-connected regions, score each region by its mean
probability, expand its box by area * unclip_ratio / perimeter, scale to the image; then
crop each box from the image, resize it to the recogniser's height keeping the aspect ratio,
normalise and pad all crops to one width.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from PIL import Image

HEIGHT = 48  # the recogniser's input height
MIN_WIDTH = 320  # the recogniser's reference width (rapidocr rec_img_shape)
MIN_SIDE = 3  # a region's box must be at least this many map pixels on its short side


class Settings(NamedTuple):
    threshold: float  # map pixels above this are text
    box_threshold: float  # regions whose mean probability is below this are dropped
    unclip_ratio: float
    max_crops: int


def initialize(params: dict[str, str]) -> Settings:
    settings = Settings(
        float(params.get("threshold", "0.3")),
        float(params.get("box_threshold", "0.5")),
        float(params.get("unclip_ratio", "2.0")),
        int(params.get("max_crops", "100")),
    )
    if settings.max_crops < 1:
        raise ValueError("max_crops must be at least 1")
    return settings


def inputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"image": ("UINT8", [1, -1, -1, 3]), "probabilities": ("FP32", [1, 1, -1, -1])}


def outputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"crops": ("FP32", [-1, 1, 3, HEIGHT, -1]), "boxes": ("INT32", [-1, 4])}


def execute(
    inputs: dict[str, np.ndarray], params: dict[str, str], settings: Settings
) -> dict[str, np.ndarray]:
    image, probabilities = inputs["image"][0], inputs["probabilities"][0, 0]
    boxes = text_boxes(probabilities, image.shape[:2], settings)
    if len(boxes) > settings.max_crops:
        _too_many(len(boxes), settings.max_crops)
    crops = crop_batch(image, boxes)
    return {"crops": crops[:, None], "boxes": boxes}


def _too_many(count: int, limit: int) -> None:
    message = (
        f"The image has {count} text boxes; this pipeline reads at most {limit} "
        "(boxes node param max_crops)"
    )
    try:
        from core.errors import InvalidInputError
    except ImportError:  # outside the server: a plain error says the same
        raise ValueError(message) from None
    raise InvalidInputError(message)


# -- detection map -> boxes ----------------------------------------------------------------


def text_boxes(
    probabilities: np.ndarray, image_size: tuple[int, int], settings: Settings
) -> np.ndarray:
    """[h,w] probability map -> INT32 [N,4] boxes (x1, y1, x2, y2) in image pixels, sorted
    top to bottom, then left to right."""
    mask = dilate(probabilities > settings.threshold)
    height, width = probabilities.shape
    scale_x, scale_y = image_size[1] / width, image_size[0] / height
    found = []
    for (x0, y0, x1, y1), score in regions(mask, probabilities):
        if min(x1 - x0, y1 - y0) < MIN_SIDE or score < settings.box_threshold:
            continue
        grow = unclip_distance(x1 - x0, y1 - y0, settings.unclip_ratio)
        if min(x1 - x0, y1 - y0) + 2 * grow < MIN_SIDE + 2:
            continue
        box = np.array(
            [
                (x0 - grow) * scale_x,
                (y0 - grow) * scale_y,
                (x1 + grow) * scale_x,
                (y1 + grow) * scale_y,
            ]
        )
        found.append(np.round(box))
    boxes = np.array(found, dtype=np.float64).reshape(-1, 4)
    boxes[:, 0::2] = boxes[:, 0::2].clip(0, image_size[1])
    boxes[:, 1::2] = boxes[:, 1::2].clip(0, image_size[0])
    return reading_order(boxes.astype(np.int32))


def dilate(mask: np.ndarray) -> np.ndarray:
    """A 2x2 dilation (each pixel also takes its up, left and up-left neighbours)."""
    out = mask.copy()
    out[1:, :] |= mask[:-1, :]
    out[:, 1:] |= mask[:, :-1]
    out[1:, 1:] |= mask[:-1, :-1]
    return out


def unclip_distance(width: float, height: float, ratio: float) -> float:
    """How far DB's unclip pushes each side of a width x height box out."""
    perimeter = 2 * (width + height)
    return width * height * ratio / perimeter if perimeter else 0.0


def regions(
    mask: np.ndarray, probabilities: np.ndarray
) -> list[tuple[tuple[int, int, int, int], float]]:
    """The 8-connected regions of a mask: bounding box (x0, y0, x1, y1, inclusive) and mean
    probability over the region's own pixels. Horizontal runs of each row are joined with the
    runs of the row above that touch them (diagonals included)."""
    padded = np.zeros((mask.shape[0], mask.shape[1] + 2), dtype=np.int8)
    padded[:, 1:-1] = mask
    edges = np.diff(padded, axis=1)
    rows, starts = np.nonzero(edges == 1)
    _, ends = np.nonzero(edges == -1)  # exclusive; same row order as the starts
    if not len(rows):
        return []
    labels = _components(len(rows), *_touching_runs(rows, starts, ends, padded.shape[1]))
    roots, group = np.unique(labels, return_inverse=True)
    count = len(roots)
    x0 = np.full(count, mask.shape[1])
    np.minimum.at(x0, group, starts)
    x1 = np.zeros(count, dtype=np.int64)
    np.maximum.at(x1, group, ends - 1)
    y0 = np.full(count, mask.shape[0])
    np.minimum.at(y0, group, rows)
    y1 = np.zeros(count, dtype=np.int64)
    np.maximum.at(y1, group, rows)
    sums = np.zeros((mask.shape[0], mask.shape[1] + 1))
    np.cumsum(probabilities, axis=1, out=sums[:, 1:])
    totals = np.bincount(group, sums[rows, ends] - sums[rows, starts], count)
    pixels = np.bincount(group, ends - starts, count)
    return [
        ((int(x0[k]), int(y0[k]), int(x1[k]), int(y1[k])), float(totals[k] / pixels[k]))
        for k in range(count)
    ]


def _touching_runs(
    rows: np.ndarray, starts: np.ndarray, ends: np.ndarray, stride: int
) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (run, run of the row above that touches it). Runs are sorted by row, then
    column, so row * stride + column keys are sorted too: the runs above that touch run i
    are one contiguous range, found by binary search."""
    above = (rows - 1) * stride
    first = np.searchsorted(rows * stride + ends, above + starts, side="left")
    last = np.searchsorted(rows * stride + starts, above + ends, side="right")
    counts = np.maximum(last - first, 0)
    runs = np.repeat(np.arange(len(rows)), counts)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return runs, np.repeat(first, counts) + offsets


def _components(count: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A label per item, equal for items joined by the (a, b) pairs: each pair takes the
    smaller label of its two ends, labels follow their label (pointer jumping), until stable."""
    labels = np.arange(count)
    while True:
        low = np.minimum(labels[a], labels[b])
        joined = labels.copy()
        np.minimum.at(joined, a, low)
        np.minimum.at(joined, b, low)
        joined = joined[joined]
        if np.array_equal(joined, labels):
            return labels
        labels = joined


def reading_order(boxes: np.ndarray) -> np.ndarray:
    """Top to bottom; boxes whose tops are within 10 pixels count as one line, left to right
    (as PaddleOCR's sorted_boxes)."""
    order = sorted(range(len(boxes)), key=lambda i: (boxes[i][1], boxes[i][0]))
    for i in range(len(order) - 1):
        for j in range(i, -1, -1):
            a, b = boxes[order[j]], boxes[order[j + 1]]
            if abs(int(b[1]) - int(a[1])) < 10 and b[0] < a[0]:
                order[j], order[j + 1] = order[j + 1], order[j]
            else:
                break
    return boxes[order].reshape(-1, 4)


# -- boxes -> recogniser crops -------------------------------------------------------------


def crop_batch(image: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """FP32 [N,3,HEIGHT,W] crops: each resized to HEIGHT keeping its aspect ratio (tall
    crops turned a quarter first, as vertical text), normalised to [-1, 1], zero-padded on
    the right to the widest one (at least MIN_WIDTH)."""
    pieces = [_upright(image[y0:y1, x0:x1]) for x0, y0, x1, y1 in boxes]
    ratios = [p.shape[1] / max(p.shape[0], 1) for p in pieces]
    width = int(HEIGHT * max([MIN_WIDTH / HEIGHT, *ratios]))
    batch = np.zeros((len(pieces), 3, HEIGHT, width), dtype=np.float32)
    for index, piece in enumerate(pieces):
        resized = resize_to_height(piece, width)
        batch[index, :, :, : resized.shape[1]] = resized.transpose(2, 0, 1) / 127.5 - 1
    return batch


def _upright(piece: np.ndarray) -> np.ndarray:
    if piece.shape[1] and piece.shape[0] / piece.shape[1] >= 1.5:
        return np.ascontiguousarray(np.rot90(piece))
    return piece


def resize_to_height(piece: np.ndarray, max_width: int) -> np.ndarray:
    height, width = max(piece.shape[0], 1), max(piece.shape[1], 1)
    target = min(max_width, int(np.ceil(HEIGHT * width / height)))
    if piece.size == 0:
        return np.zeros((HEIGHT, target, 3), dtype=np.uint8)
    resized = Image.fromarray(np.ascontiguousarray(piece)).resize(
        (max(target, 1), HEIGHT), Image.Resampling.BILINEAR
    )
    return np.asarray(resized)
