"""Bench models, built deterministically with openvino's opset API.

`resnet50_like()`: the ResNet-50 v1 topology (7x7 stem, max pool, bottleneck stages of 3, 4, 6
and 3 blocks, global average pool, 2048x1000 dense, softmax) without batch norm (folded into
the conv biases, as a deployed IR has it): 25.5 M parameters, ~4.1 GFLOPs per image, a
[N,3,224,224] f32 "input" -> [N,1000] "probabilities" classifier. Weights are He-initialised
from a fixed seed so activations stay finite.
"""

from __future__ import annotations

import numpy as np
import openvino as ov
from openvino import opset13 as ops

STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, stride)


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.params = 0

    def conv(
        self, x: ov.Node | ov.Output, out: int, kernel: int, stride: int = 1, relu: bool = True
    ) -> ov.Node:
        channels = _channels(x)
        fan_in = channels * kernel * kernel
        weights = self.rng.standard_normal((out, channels, kernel, kernel), dtype=np.float32)
        weights *= np.float32(np.sqrt(2.0 / fan_in) * (1.0 if relu else 0.5))
        bias = np.zeros((1, out, 1, 1), dtype=np.float32)
        self.params += weights.size + out
        pad = kernel // 2
        y = ops.convolution(
            x, ops.constant(weights), [stride, stride], [pad, pad], [pad, pad], [1, 1]
        )
        y = ops.add(y, ops.constant(bias))
        return ops.relu(y) if relu else y

    def bottleneck(self, x: ov.Node | ov.Output, width: int, stride: int) -> ov.Node:
        channels = _channels(x)
        y = self.conv(x, width, 1)
        y = self.conv(y, width, 3, stride)
        y = self.conv(y, 4 * width, 1, relu=False)
        shortcut = x
        if stride != 1 or channels != 4 * width:
            shortcut = self.conv(x, 4 * width, 1, stride, relu=False)
        return ops.relu(ops.add(y, shortcut))


def _channels(x: ov.Node | ov.Output) -> int:
    port = x if isinstance(x, ov.Output) else x.output(0)
    return int(port.get_partial_shape()[1].get_length())


def resnet50_like(seed: int = 0, batch: int | None = 1, classes: int = 1000) -> ov.Model:
    build = _Builder(seed)
    data = ops.parameter([batch if batch else -1, 3, 224, 224], np.float32, name="input")
    data.output(0).set_names({"input"})
    x = build.conv(data, 64, 7, 2)
    x = ops.max_pool(x, [2, 2], [1, 1], [1, 1], [1, 1], [3, 3]).output(0)
    for width, blocks, stride in STAGES:
        for index in range(blocks):
            x = build.bottleneck(x, width, stride if index == 0 else 1)
    pooled = ops.reduce_mean(x, ops.constant(np.array([2, 3], dtype=np.int64)), False)
    weights = build.rng.standard_normal((2048, classes), dtype=np.float32)
    weights *= np.float32(np.sqrt(1.0 / 2048))
    build.params += weights.size
    probs = ops.softmax(ops.matmul(pooled, ops.constant(weights), False, False), 1)
    probs.output(0).set_names({"probabilities"})
    model = ov.Model([probs], [data], "resnet50_like")
    model.get_parameters()[0].set_layout(ov.Layout("NCHW"))
    model.set_rt_info(str(build.params), "parameters")
    return model
