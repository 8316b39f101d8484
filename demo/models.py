"""Small real models built with openvino's opset API, deterministically (fixed seeds).

Used by the quick start (`ov-serverless serve` with no arguments) and by the tests.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov
from openvino import opset13 as ops


def classifier(seed: int = 0, batch: int | None = 1, classes: int = 1000) -> ov.Model:
    """conv -> relu -> global avg pool -> matmul -> softmax: [N,3,224,224] -> [N,classes]."""
    rng = np.random.default_rng(seed)
    data = ops.parameter([batch if batch else -1, 3, 224, 224], np.float32, name="input")
    data.output(0).set_names({"input"})
    kernel = ops.constant(rng.normal(0, 0.1, (16, 3, 3, 3)).astype(np.float32))
    conv = ops.convolution(data, kernel, [2, 2], [1, 1], [1, 1], [1, 1])
    relu = ops.relu(conv)
    pooled = ops.reduce_mean(relu, ops.constant(np.array([2, 3], dtype=np.int64)), False)
    weights = ops.constant(rng.normal(0, 0.5, (16, classes)).astype(np.float32))
    logits = ops.matmul(pooled, weights, False, False)
    probs = ops.softmax(logits, 1)
    probs.output(0).set_names({"probabilities"})
    model = ov.Model([probs], [data], "classifier")
    model.get_parameters()[0].set_layout(ov.Layout("NCHW"))
    return model


def two_inputs(seed: int = 0) -> ov.Model:
    """a [N,4] f32, b [N,4] f32 -> sum [N,4], product [N,4]."""
    del seed
    a = ops.parameter([-1, 4], np.float32, name="a")
    b = ops.parameter([-1, 4], np.float32, name="b")
    a.output(0).set_names({"a"})
    b.output(0).set_names({"b"})
    total = ops.add(a, b)
    total.output(0).set_names({"sum"})
    product = ops.multiply(a, b)
    product.output(0).set_names({"product"})
    return ov.Model([total, product], [a, b], "two_inputs")


def scaler(factor: float, shape: tuple[int, ...] = (-1, 4)) -> ov.Model:
    """x * factor; versions of a repository differ by factor, so tests can tell them apart."""
    x = ops.parameter(list(shape), np.float32, name="x")
    x.output(0).set_names({"x"})
    y = ops.multiply(x, ops.constant(np.float32(factor)))
    y.output(0).set_names({"y"})
    return ov.Model([y], [x], "scaler")


def save(model: ov.Model, folder: Path, name: str = "model") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.xml"
    ov.save_model(model, path, compress_to_fp16=False)
    return path


def write_demo_repository(root: Path) -> Path:
    """A ready-to-serve OVMS repository: config.json + the classifier as version 1."""
    save(classifier(seed=0, batch=None), root / "classifier" / "1")
    save(scaler(2.0), root / "scaler" / "1")
    (root / "config.json").write_text(
        '{"model_config_list": [\n'
        '  {"config": {"name": "classifier", "base_path": "classifier"}},\n'
        '  {"config": {"name": "scaler", "base_path": "scaler"}}\n]}\n'
    )
    return root / "config.json"
