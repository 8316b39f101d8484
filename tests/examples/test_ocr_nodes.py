"""The OCR example's node code on its own: connected regions against a plain flood fill, DB
box expansion and scaling, reading order, CTC greedy decoding, the charset from rt_info."""

from __future__ import annotations

from collections import deque
from pathlib import Path

import numpy as np
import pytest

from examples.ocr import boxes_node, decode_node


def flood_fill_regions(mask: np.ndarray) -> list[tuple[int, int, int, int]]:
    """Reference: 8-connected regions by breadth-first search, as bounding boxes."""
    seen = np.zeros_like(mask, dtype=bool)
    found = []
    for y, x in zip(*np.nonzero(mask), strict=True):
        if seen[y, x]:
            continue
        seen[y, x] = True
        queue, box = deque([(y, x)]), [x, y, x, y]
        while queue:
            cy, cx = queue.popleft()
            box = [min(box[0], cx), min(box[1], cy), max(box[2], cx), max(box[3], cy)]
            for ny in range(cy - 1, cy + 2):
                for nx in range(cx - 1, cx + 2):
                    if (
                        0 <= ny < mask.shape[0]
                        and 0 <= nx < mask.shape[1]
                        and mask[ny, nx]
                        and not seen[ny, nx]
                    ):
                        seen[ny, nx] = True
                        queue.append((ny, nx))
        found.append((box[0], box[1], box[2], box[3]))
    return sorted(found)


@pytest.mark.parametrize("seed", range(6))
def test_regions_equal_a_flood_fill(seed: int) -> None:
    rng = np.random.default_rng(seed)
    mask = rng.random((40, 60)) < [0.2, 0.35, 0.45, 0.5, 0.55, 0.6][seed]
    probabilities = rng.random(mask.shape).astype(np.float32)
    got = boxes_node.regions(mask, probabilities)
    assert sorted(box for box, _ in got) == flood_fill_regions(mask)
    for (x0, y0, x1, y1), score in got:  # the mean over the region's own pixels
        inside = mask[y0 : y1 + 1, x0 : x1 + 1]
        assert score <= probabilities[y0 : y1 + 1, x0 : x1 + 1][inside].max() + 1e-6


def test_a_u_shape_and_a_diagonal_are_one_region_each() -> None:
    mask = np.zeros((8, 12), dtype=bool)
    mask[1:6, 1] = mask[1:6, 5] = mask[5, 1:6] = True  # a U: its arms meet only at the bottom
    mask[1, 8] = mask[2, 9] = mask[3, 10] = True  # touching by corners only
    probabilities = mask.astype(np.float32)
    boxes = sorted(box for box, _ in boxes_node.regions(mask, probabilities))
    assert boxes == [(1, 1, 5, 5), (8, 1, 10, 3)]
    assert boxes_node.regions(np.zeros((4, 4), dtype=bool), np.zeros((4, 4))) == []


def test_a_text_region_becomes_an_expanded_box_in_image_pixels() -> None:
    probabilities = np.zeros((64, 128), dtype=np.float32)
    probabilities[20:30, 10:90] = 0.9
    settings = boxes_node.initialize({"unclip_ratio": "2.0"})
    boxes = boxes_node.text_boxes(probabilities, (128, 256), settings)  # image 2x the map
    # the 2x2 dilation grows the region a pixel right and down: x 10..90, y 20..30 (80 x 10)
    grow = 80 * 10 * 2.0 / (2 * (80 + 10))
    expected = np.round(np.array([10 - grow, 20 - grow, 90 + grow, 30 + grow]) * 2)
    assert boxes.tolist() == [expected.astype(int).tolist()]


def test_faint_or_tiny_regions_are_dropped() -> None:
    probabilities = np.zeros((64, 128), dtype=np.float32)
    probabilities[5:15, 10:90] = 0.4  # above the pixel threshold, below the box threshold
    probabilities[40:42, 10:90] = 0.9  # too thin
    settings = boxes_node.initialize({})
    assert boxes_node.text_boxes(probabilities, (64, 128), settings).shape == (0, 4)


def test_reading_order_is_top_down_then_left_to_right_on_a_line() -> None:
    boxes = np.array([[300, 52, 400, 80], [10, 50, 200, 80], [10, 120, 200, 150]])
    assert boxes_node.reading_order(boxes).tolist() == [
        [10, 50, 200, 80],
        [300, 52, 400, 80],
        [10, 120, 200, 150],
    ]


def test_too_many_boxes_names_the_count_and_the_limit() -> None:
    probabilities = np.zeros((64, 128), dtype=np.float32)
    for row in range(3):
        probabilities[5 + row * 20 : 15 + row * 20, 10:90] = 0.9
    image = np.zeros((1, 64, 128, 3), dtype=np.uint8)
    settings = boxes_node.initialize({"max_crops": "2"})
    with pytest.raises(Exception, match="3 text boxes; this pipeline reads at most 2"):
        boxes_node.execute(
            {"image": image, "probabilities": probabilities[None, None]}, {}, settings
        )


def test_crops_keep_their_aspect_ratio_and_share_one_padded_width() -> None:
    image = np.full((100, 400, 3), 255, dtype=np.uint8)
    crops = boxes_node.crop_batch(image, np.array([[0, 0, 240, 24], [0, 30, 400, 54]]))
    assert crops.shape == (2, 3, 48, 800)  # 400x24 -> 800x48, the widest
    assert (crops[0, :, :, :480] == 1).all() and (crops[0, :, :, 480:] == 0).all()


def test_greedy_ctc_merges_repeats_and_drops_blanks() -> None:
    characters = ("", "a", "b", "l", " ")
    steps = np.zeros((9, 5), dtype=np.float32)
    for step, index in enumerate([1, 1, 0, 3, 0, 3, 3, 4, 2]):  # a a _ l _ l l ' ' b
        steps[step, index] = 0.9 if step else 0.6
    text, score = decode_node.greedy(steps, characters)
    assert text == "all b"
    assert score == pytest.approx((0.6 + 0.9 * 4) / 5)
    assert decode_node.greedy(np.eye(5)[[0, 0]], characters) == ("", 0.0)


def test_the_charset_comes_from_the_recognisers_rt_info(ocr_root: Path) -> None:
    characters = decode_node.load_characters(ocr_root / "text_recognise/1/model.xml")
    assert len(characters) == 6625  # the recogniser's classes
    assert characters[0] == "" and characters[-1] == " "
    assert {"A", "z", "7", "你", "好"} <= set(characters)
    with pytest.raises(ValueError, match="has no rt_info framework/character"):
        decode_node.load_characters(ocr_root / "text_detect/1/model.xml")
