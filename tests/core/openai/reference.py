"""An independent numpy forward pass of BERT (no openvino), the reference the served numbers
are checked against."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np


def _linear(x: np.ndarray, w: Mapping[str, np.ndarray], prefix: str) -> np.ndarray:
    return x @ w[f"{prefix}.weight"].T.astype(np.float64) + w[f"{prefix}.bias"]


def _norm(x: np.ndarray, w: Mapping[str, np.ndarray], prefix: str, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w[f"{prefix}.weight"] + w[f"{prefix}.bias"]


def _gelu(x: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def hidden_states(
    w: Mapping[str, np.ndarray],
    config: Mapping[str, Any],
    ids: np.ndarray,
    mask: np.ndarray,
    types: np.ndarray | None = None,
) -> np.ndarray:
    """BertModel's last_hidden_state [B, S, H] in float64."""
    w = {k.removeprefix("bert."): v for k, v in w.items()}
    eps = float(config["layer_norm_eps"])
    heads = int(config["num_attention_heads"])
    types = np.zeros_like(ids) if types is None else types
    batch, length = ids.shape
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][np.arange(length)][None]
        + w["embeddings.token_type_embeddings.weight"][types]
    ).astype(np.float64)
    x = _norm(x, w, "embeddings.LayerNorm", eps)
    bias = (1.0 - mask[:, None, None, :]) * -1e4
    size = x.shape[-1] // heads
    for layer in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{layer}"

        def split(t: np.ndarray) -> np.ndarray:
            return t.reshape(batch, length, heads, size).transpose(0, 2, 1, 3)

        q, k, v = (
            split(_linear(x, w, f"{p}.attention.self.{n}")) for n in ("query", "key", "value")
        )
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(size) + bias
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        probs = scores / scores.sum(-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, length, heads * size)
        x = _norm(
            _linear(context, w, f"{p}.attention.output.dense") + x,
            w,
            f"{p}.attention.output.LayerNorm",
            eps,
        )
        inner = _gelu(_linear(x, w, f"{p}.intermediate.dense"))
        x = _norm(_linear(inner, w, f"{p}.output.dense") + x, w, f"{p}.output.LayerNorm", eps)
    return x


def mean_pooled(hidden: np.ndarray, mask: np.ndarray, normalize: bool = True) -> np.ndarray:
    summed = (hidden * mask[..., None]).sum(1)
    pooled = summed / np.maximum(mask.sum(1, keepdims=True), 1e-9)
    if normalize:
        pooled = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
    return pooled


def cross_encoder_logits(
    w: Mapping[str, np.ndarray], config: Mapping[str, Any], ids: np.ndarray, mask: np.ndarray
) -> np.ndarray:
    hidden = hidden_states(w, config, ids, mask)
    pooled = np.tanh(_linear(hidden[:, 0], w, "pooler.dense"))
    return _linear(pooled, w, "classifier")
