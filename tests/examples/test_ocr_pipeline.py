"""examples/ocr in process: real text rendered with Pillow goes in as a jpeg or png, the same
text comes out of the real PP-OCRv4 models, with boxes around the drawn lines; the numbers
equal the same steps run by hand (openvino + the node code); bad input gets a clear answer."""

from __future__ import annotations

import base64
import io
import struct
import sys
from pathlib import Path

import numpy as np
import openvino as ov
import pytest
from PIL import Image

from core.api import App
from core.tensors import limits
from tests.core.serving.pipeline.helpers import app_for, call, doc, error
from tests.examples.conftest import Rendered, cjk_font, render

LATIN = ["Hello OCR 2024", "Serverless OpenVINO", "invoice no. 31415", "MiXeD CaSe Words"]


def _tfs(data: bytes) -> dict[str, object]:
    return {"inputs": {"image": [{"b64": base64.b64encode(data).decode()}]}}


def ocr(app: App, data: bytes) -> dict[str, np.ndarray]:
    outputs = doc(call(app, "POST", "/v1/models/ocr:predict", _tfs(data)))["outputs"]
    return {
        "texts": np.asarray(outputs["texts"], dtype=object),
        "boxes": np.asarray(outputs["boxes"]),
        "scores": np.asarray(outputs["scores"]),
    }


def edit_distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (ca != cb))
    return row[-1]


def assert_read(got: dict[str, np.ndarray], image: Rendered, max_cer: float) -> None:
    """One box per drawn line, in order, covering it; each line's characters exact (the
    model may drop a word space: spaces count only in the character error rate)."""
    texts = list(got["texts"])
    assert len(texts) == len(image.lines), texts
    for text, line, box in zip(texts, image.lines, got["boxes"], strict=True):
        assert text.replace(" ", "") == line.text.replace(" ", ""), (text, line.text)
        x1, y1, x2, y2 = line.box
        assert box[0] <= x1 + 2 and box[1] <= y1 + 2 and box[2] >= x2 - 2 and box[3] >= y2 - 2, (
            box.tolist(),
            line,
        )
        assert box[3] - box[1] <= 2.5 * (y2 - y1), (box.tolist(), line)  # one line, not two
    errors = sum(edit_distance(t, line.text) for t, line in zip(texts, image.lines, strict=True))
    assert errors / sum(len(line.text) for line in image.lines) <= max_cer, texts
    assert ((got["scores"] > 0.5) & (got["scores"] <= 1)).all(), got["scores"]


CASES = {
    "jpeg 640x480 dark on paper": dict(lines=LATIN, size=40),
    "png 400x300 small digits": dict(
        lines=["0123456789", "3.14159 + 2.71828", "Quick Brown"],
        size=24,
        canvas=(400, 300),
        background=(255, 255, 255),
        ink=(0, 0, 0),
        fmt="PNG",
    ),
    "jpeg 1000x700 light on dark": dict(
        lines=LATIN[:3], size=60, canvas=(1000, 700), background=(25, 30, 60), ink=(250, 240, 200)
    ),
    "png 800x600 white on blue": dict(
        lines=["OpenVINO Model Server", "ABCDEFG abcdefg 789"],
        size=32,
        canvas=(800, 600),
        background=(40, 90, 160),
        ink=(255, 255, 255),
        fmt="PNG",
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_rendered_lines_come_back(ocr_app: App, case: str) -> None:
    image = render(**CASES[case])  # type: ignore[arg-type]
    assert_read(ocr(ocr_app, image.data), image, max_cer=0.15)


def test_a_chinese_phrase_comes_back_exactly(ocr_app: App) -> None:
    image = render(
        ["你好世界，光学字符识别", "开放源代码 2024"],
        font=cjk_font(36),
        size=36,
        background=(255, 255, 255),
        ink=(0, 0, 0),
        fmt="PNG",
    )
    got = ocr(ocr_app, image.data)
    texts = [t.replace(" ", "") for t in got["texts"]]
    assert texts == ["你好世界，光学字符识别", "开放源代码2024"]
    assert_read(got, image, max_cer=0.1)


def test_a_photo_of_a_page_gives_words_that_are_in_it(ocr_app: App) -> None:
    from skimage import data

    buffer = io.BytesIO()
    Image.fromarray(data.page()).save(buffer, format="PNG")
    words = " ".join(ocr(ocr_app, buffer.getvalue())["texts"])
    for word in (
        "Region-based",
        "segmentation",
        "markers",
        "coins",
        "background",
        "histogram",
        "unambiguously",
    ):
        assert word in words, words


def test_numbers_equal_the_steps_by_hand(ocr_app: App, ocr_root: Path) -> None:
    image = render(LATIN, size=40)
    got = ocr(ocr_app, image.data)

    sys.path.insert(0, str(ocr_root / "nodes"))
    try:
        import boxes_node
        import decode_node
    finally:
        sys.path.pop(0)
    core = ov.Core()
    detect = core.compile_model(str(ocr_root / "text_detect/1/model.xml"), "CPU")
    recognise = core.compile_model(str(ocr_root / "text_recognise/1/model.xml"), "CPU")
    with Image.open(io.BytesIO(image.data)) as decoded:  # as the server decodes: BGR
        pixels = np.asarray(decoded.convert("RGB"))[:, :, ::-1][None].copy()
    found = boxes_node.execute(
        {"image": pixels, "probabilities": detect(pixels)[0]},
        {},
        boxes_node.initialize({"max_crops": "100"}),
    )
    characters = np.stack([recognise(crop)[0] for crop in found["crops"]])
    charset = decode_node.initialize(
        {"charset_model": str(ocr_root / "text_recognise/1/model.xml")}
    )
    expected = decode_node.execute(
        {"probabilities": characters, "boxes": found["boxes"]}, {}, charset
    )

    assert got["texts"].tolist() == expected["texts"].tolist()
    np.testing.assert_array_equal(got["boxes"], expected["boxes"])
    np.testing.assert_allclose(got["scores"], expected["scores"], rtol=1e-5)


def test_kserve_binary_gives_the_texts_as_bytes(ocr_app: App) -> None:
    image = render(LATIN[:2], size=40)
    element = struct.pack("<I", len(image.data)) + image.data  # BYTES: 4-byte length first
    header = (
        b'{"inputs": [{"name": "image", "shape": [1], "datatype": "BYTES", '
        b'"parameters": {"binary_data_size": %d}}]}' % len(element)
    )
    reply = call(
        ocr_app,
        "POST",
        "/v2/models/ocr/infer",
        header + element,
        {"Inference-Header-Content-Length": str(len(header))},
    )
    outputs = {o["name"]: o for o in doc(reply)["outputs"]}
    assert outputs["texts"]["datatype"] == "BYTES"
    assert [t.replace(" ", "") for t in outputs["texts"]["data"]] == [
        "HelloOCR2024",
        "ServerlessOpenVINO",
    ]
    assert outputs["boxes"]["shape"] == [2, 4] and outputs["scores"]["shape"] == [2]


def test_metadata_names_the_answer(ocr_app: App) -> None:
    meta = doc(call(ocr_app, "GET", "/v2/models/ocr"))
    assert [(o["name"], o["datatype"], o["shape"]) for o in meta["outputs"]] == [
        ("boxes", "INT32", [-1, 4]),
        ("scores", "FP32", [-1]),
        ("texts", "BYTES", [-1]),
    ]


# -- bad input ------------------------------------------------------------------------------


def test_not_an_image_is_a_400(ocr_app: App) -> None:
    reply = call(ocr_app, "POST", "/v1/models/ocr:predict", _tfs(b"%PDF-1.4 not an image"))
    assert reply.status == 400
    assert "not a jpeg or png" in error(reply)


def test_an_image_without_text_is_a_204(ocr_app: App) -> None:
    plain = render([], canvas=(640, 480))
    reply = call(ocr_app, "POST", "/v1/models/ocr:predict", _tfs(plain.data))
    assert reply.status == 204, reply.body


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_an_image_over_the_pixel_limit_is_a_400(ocr_root: Path, tmp_path: Path) -> None:
    from dataclasses import replace

    app = app_for(ocr_root / "config.json", tmp_path)
    small = replace(app.settings, limits=limits.Limits(max_image_pixels=1000 * 1000))
    app = App(app.manager, small)
    reply = call(
        app, "POST", "/v1/models/ocr:predict", _tfs(render(LATIN[:1], canvas=(1200, 900)).data)
    )
    assert reply.status == 400
    assert "1200x900 pixels exceed the limit of 1000000 pixels" in error(reply)


def test_more_boxes_than_max_crops_is_a_400(ocr_root: Path, tmp_path: Path) -> None:
    import json

    from examples.ocr.build import config_entries

    config = tmp_path / "config.json"
    entries = config_entries(max_crops=2)
    for entry in entries["model_config_list"]:
        entry["config"]["base_path"] = str(ocr_root / entry["config"]["base_path"])
    for library in entries["custom_node_library_config_list"]:
        library["base_path"] = str(ocr_root / library["base_path"])
    config.write_text(json.dumps(entries))
    app = app_for(config, tmp_path / "cache")
    reply = call(app, "POST", "/v1/models/ocr:predict", _tfs(render(LATIN[:3]).data))
    assert reply.status == 400
    assert error(reply) == (
        "The image has 3 text boxes; this pipeline reads at most 2 (boxes node param max_crops)"
    )
    assert reply.status == 400
    assert doc(call(app, "POST", "/v1/models/ocr:predict", _tfs(render(LATIN[:2]).data)))
