"""Build the example's model repository: detector + classifier + pipeline config.json.

python examples/detect_classify/build.py /tmp/detect_classify
ov-serverless serve --config_path /tmp/detect_classify/config.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import openvino as ov
from openvino import opset13 as ops

from demo.models import classifier, save

HERE = Path(__file__).resolve().parent


def detector() -> ov.Model:
    """Scores each 112x112 quadrant of a 1x3x224x224 image by its mean brightness / 255."""
    image = ops.parameter([1, 3, 224, 224], np.float32, name="image")
    image.output(0).set_names({"image"})
    pooled = ops.avg_pool(image, [112, 112], [0, 0], [0, 0], [112, 112], True)
    brightness = ops.reduce_mean(pooled, ops.constant(np.array([1], dtype=np.int64)), False)
    flat = ops.reshape(brightness, ops.constant(np.array([1, 4], dtype=np.int64)), False)
    scores = ops.multiply(flat, ops.constant(np.float32(1 / 255)))
    scores.output(0).set_names({"scores"})
    model = ov.Model([scores], [image], "detector")
    model.get_parameters()[0].set_layout(ov.Layout("NCHW"))
    return model


def pipeline_config(threshold: float = 0.5) -> dict[str, object]:
    return {
        "name": "detect_classify",
        "inputs": ["image"],
        "nodes": [
            {
                "name": "detect",
                "type": "DL model",
                "model_name": "detector",
                "inputs": [{"image": {"node_name": "request", "data_item": "image"}}],
                "outputs": [{"data_item": "scores", "alias": "scores"}],
            },
            {
                "name": "crop",
                "type": "custom",
                "library_name": "crop",
                "params": {"threshold": str(threshold)},
                "demultiply_count": 0,
                "inputs": [
                    {"image": {"node_name": "request", "data_item": "image"}},
                    {"scores": {"node_name": "detect", "data_item": "scores"}},
                ],
                "outputs": [
                    {"data_item": "crops", "alias": "crops"},
                    {"data_item": "boxes", "alias": "boxes"},
                ],
            },
            {
                "name": "classify",
                "type": "DL model",
                "model_name": "classifier",
                "inputs": [{"input": {"node_name": "crop", "data_item": "crops"}}],
                "outputs": [{"data_item": "probabilities", "alias": "probabilities"}],
            },
        ],
        "outputs": [
            {"probabilities": {"node_name": "classify", "data_item": "probabilities"}},
            {"boxes": {"node_name": "crop", "data_item": "boxes"}},
        ],
    }


def build(root: Path, threshold: float = 0.5) -> Path:
    save(detector(), root / "detector" / "1")
    save(classifier(seed=0, batch=1), root / "classifier" / "1")
    config = {
        "model_config_list": [
            {"config": {"name": "detector", "base_path": "detector"}},
            {"config": {"name": "classifier", "base_path": "classifier"}},
        ],
        "custom_node_library_config_list": [
            {"name": "crop", "base_path": str(HERE / "crop_node.py")}
        ],
        "pipeline_config_list": [pipeline_config(threshold)],
    }
    path = root / "config.json"
    path.write_text(json.dumps(config, indent=2))
    return path


if __name__ == "__main__":
    print(build(Path(sys.argv[1] if len(sys.argv) > 1 else "detect_classify_repo")))
