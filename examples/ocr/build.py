"""Build the OCR example's repository from the rapidocr-onnxruntime wheel's PP-OCRv4 models:
text_detect + text_recognise as IR, the two custom nodes, config.json and a sample jpeg.

    pip install --no-deps rapidocr-onnxruntime==1.4.4
    python -m examples.ocr.build /tmp/ocr
    ov-serverless serve --config_path /tmp/ocr/config.json

The package is only a carrier for the ONNX files: it is located, never imported.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import openvino as ov
from openvino import opset13 as ops

from demo.models import save

HERE = Path(__file__).resolve().parent
WHEEL = "rapidocr_onnxruntime"
DETECT_ONNX = "ch_PP-OCRv4_det_infer.onnx"
RECOGNISE_ONNX = "ch_PP-OCRv4_rec_infer.onnx"
SHORT_SIDE = 736  # the detector's input: short side scaled up to this (rapidocr limit_type min)
LONG_SIDE = 2000  # ... and the long side down to this (rapidocr max_side_len)
SAMPLE_LINES = ("Hello, world!", "OpenVINO Model Server", "Order 31415 ships today")


class WheelMissing(RuntimeError):
    pass


def models_dir() -> Path:
    """The wheel's models/ folder, found without importing the package."""
    spec = importlib.util.find_spec(WHEEL)
    if spec is None or not spec.submodule_search_locations:
        raise WheelMissing(
            f"{WHEEL} is not installed: pip install --no-deps rapidocr-onnxruntime==1.4.4"
        )
    return Path(list(spec.submodule_search_locations)[0]) / "models"


def _i64(*values: int) -> ov.Node:
    return ops.constant(np.array(values, dtype=np.int64))


def _f32(value: float) -> ov.Node:
    return ops.constant(np.array([value], dtype=np.float32))


def detector(onnx: Path) -> ov.Model:
    """image u8 [1,H,W,3] (BGR, as decoded) -> probabilities [1,1,h,w]: the image is resized
    in the graph (short side to SHORT_SIDE, long side at most LONG_SIDE, both rounded to a
    multiple of 32, bilinear) and normalised to (x/255 - 0.5)/0.5 before the PP-OCRv4 DB net."""
    net = ov.Core().read_model(onnx)
    image = ops.parameter([1, -1, -1, 3], np.uint8, name="image")
    image.output(0).set_names({"image"})
    x = ops.transpose(ops.convert(image, np.float32), _i64(0, 3, 1, 2))
    size = ops.convert(ops.gather(ops.shape_of(x), _i64(2, 3), _i64(0)), np.float32)
    axis = _i64(0)
    scale = ops.maximum(ops.divide(_f32(SHORT_SIDE), ops.reduce_min(size, axis)), _f32(1))
    scale = ops.minimum(scale, ops.divide(_f32(LONG_SIDE), ops.reduce_max(size, axis)))
    target = ops.round(ops.divide(ops.multiply(size, scale), _f32(32)), "half_to_even")
    target = ops.multiply(ops.maximum(target, _f32(1)), _f32(32))
    resized = ops.interpolate(
        x, ops.convert(target, np.int64), "linear_onnx", "sizes", axes=_i64(2, 3)
    )
    normalised = ops.subtract(ops.divide(resized, _f32(127.5)), _f32(1))
    for consumer in net.get_parameters()[0].output(0).get_target_inputs():
        consumer.replace_source_output(normalised.output(0))
    result = net.get_results()[0]
    result.output(0).get_tensor().set_names({"probabilities"})
    model = ov.Model([result], [image], "text_detect")
    model.get_parameters()[0].set_layout(ov.Layout("NHWC"))
    return model


def recogniser(onnx: Path) -> ov.Model:
    """crop f32 [1,3,48,W] (normalised) -> per-step character probabilities [1,W/8,6625];
    the character set stays in rt_info ["framework", "character"], as the ONNX file has it."""
    model = ov.Core().read_model(onnx)
    model.inputs[0].get_tensor().set_names({"crop"})
    model.outputs[0].get_tensor().set_names({"probabilities"})
    model.get_parameters()[0].set_layout(ov.Layout("NCHW"))
    return model


def pipeline_config(max_crops: int = 100) -> dict[str, object]:
    request = {"node_name": "request", "data_item": "image"}
    return {
        "name": "ocr",
        "inputs": ["image"],
        "nodes": [
            {
                "name": "detect",
                "type": "DL model",
                "model_name": "text_detect",
                "inputs": [{"image": request}],
                "outputs": [{"data_item": "probabilities", "alias": "map"}],
            },
            {
                "name": "boxes",
                "type": "custom",
                "library_name": "ocr_boxes",
                "params": {"max_crops": str(max_crops)},
                "demultiply_count": 0,
                "inputs": [
                    {"image": request},
                    {"probabilities": {"node_name": "detect", "data_item": "map"}},
                ],
                "outputs": [
                    {"data_item": "crops", "alias": "crops"},
                    {"data_item": "boxes", "alias": "boxes"},
                ],
            },
            {
                "name": "recognise",
                "type": "DL model",
                "model_name": "text_recognise",
                "inputs": [{"crop": {"node_name": "boxes", "data_item": "crops"}}],
                "outputs": [{"data_item": "probabilities", "alias": "characters"}],
            },
            {
                "name": "decode",
                "type": "custom",
                "library_name": "ocr_decode",
                "params": {"charset_model": "../text_recognise/1/model.xml"},
                "gather_from_node": "boxes",
                "inputs": [
                    {"probabilities": {"node_name": "recognise", "data_item": "characters"}},
                    {"boxes": {"node_name": "boxes", "data_item": "boxes"}},
                ],
                "outputs": [
                    {"data_item": "texts", "alias": "texts"},
                    {"data_item": "boxes", "alias": "boxes"},
                    {"data_item": "scores", "alias": "scores"},
                ],
            },
        ],
        "outputs": [
            {"texts": {"node_name": "decode", "data_item": "texts"}},
            {"boxes": {"node_name": "decode", "data_item": "boxes"}},
            {"scores": {"node_name": "decode", "data_item": "scores"}},
        ],
    }


def config_entries(max_crops: int = 100) -> dict[str, list[dict[str, object]]]:
    """The example's part of a config.json (paths relative to the repository root)."""
    return {
        "model_config_list": [
            {"config": {"name": "text_detect", "base_path": "text_detect"}},
            {"config": {"name": "text_recognise", "base_path": "text_recognise"}},
        ],
        "custom_node_library_config_list": [
            {"name": "ocr_boxes", "base_path": "nodes/boxes_node.py"},
            {"name": "ocr_decode", "base_path": "nodes/decode_node.py"},
        ],
        "pipeline_config_list": [pipeline_config(max_crops)],
    }


def write_models(root: Path) -> None:
    """Models, node files and the sample image into `root` (config.json is the caller's)."""
    source = models_dir()
    if not (root / "text_detect" / "1" / "model.xml").exists():
        save(detector(source / DETECT_ONNX), root / "text_detect" / "1")
    if not (root / "text_recognise" / "1" / "model.xml").exists():
        save(recogniser(source / RECOGNISE_ONNX), root / "text_recognise" / "1")
    nodes = root / "nodes"
    nodes.mkdir(parents=True, exist_ok=True)
    for name in ("boxes_node.py", "decode_node.py"):
        shutil.copyfile(HERE / name, nodes / name)
    (root / "sample.jpg").write_bytes(sample_jpeg())


def sample_jpeg(lines: tuple[str, ...] = SAMPLE_LINES) -> bytes:
    """A 640x480 jpeg with dark text lines on a light background, drawn with Pillow."""
    import io

    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", (640, 480), (236, 232, 222))
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=44)
    for row, line in enumerate(lines):
        draw.text((40, 50 + row * 80), line, fill=(30, 30, 40), font=font)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def build(root: Path, max_crops: int = 100) -> Path:
    write_models(root)
    path = root / "config.json"
    path.write_text(json.dumps(config_entries(max_crops), indent=2))
    return path


if __name__ == "__main__":
    print(build(Path(sys.argv[1] if len(sys.argv) > 1 else "ocr_repo")))
