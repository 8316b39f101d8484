"""The pooling and normalisation OVMS appends to an embeddings model, built into its graph (so
a request runs one inference): hidden states -> one [batch, hidden] `embeddings` output."""

from __future__ import annotations

import numpy as np
import openvino as ov
from openvino import opset13 as ops

from core.errors import ServingError
from core.openai.layout import MODEL_FILE

EMBEDDINGS_OUTPUT = "embeddings"


def add_pooling(model: ov.Model, pooling: str, normalize: bool) -> None:
    """Replace the model's results by one [batch, hidden] `embeddings` output: the hidden
    states (the 3-D output) pooled over the attended tokens, then L2-normalised."""
    hidden = [
        r.input_value(0)
        for r in model.get_results()
        if r.get_output_partial_shape(0).rank.get_length() == 3
    ]
    if not hidden:
        raise ServingError(f"{MODEL_FILE} has no 3-D output (hidden states) to pool")
    states = hidden[0]
    mask = next(p for p in model.get_parameters() if "attention_mask" in p.output(0).get_names())
    pooled = _pool(states, mask.output(0), pooling)
    if normalize:
        pooled = ops.normalize_l2(pooled, ops.constant(np.array([1], np.int64)), 1e-12, "max")
    pooled.output(0).set_names({EMBEDDINGS_OUTPUT})
    for result in list(model.get_results()):
        model.remove_result(result)
    model.add_results([ops.result(pooled)])


def _pool(states: ov.Output, mask: ov.Output, pooling: str) -> ov.Node:
    zero, one = ops.constant(np.int64(0)), ops.constant(np.int64(1))
    if pooling == "CLS":
        return ops.gather(states, zero, one)
    weights = ops.convert(mask, "f32")
    if pooling == "MEAN":
        summed = ops.reduce_sum(
            ops.multiply(states, ops.unsqueeze(weights, ops.constant(np.int64(-1)))), one, False
        )
        count = ops.maximum(ops.reduce_sum(weights, one, True), ops.constant(np.float32(1e-9)))
        return ops.divide(summed, count)
    # LAST: the last attended token of each (right-padded) row
    last = ops.subtract(ops.reduce_sum(ops.convert(mask, "i64"), one, False), one)
    return ops.gather(states, last, one, 1)
