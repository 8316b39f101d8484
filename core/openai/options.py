"""What an embeddings or rerank model folder says about how to serve it, as OVMS reads it.

Sources, later ones winning: the folder's `config.json` (context length, pad token),
`1_Pooling/config.json` (sentence-transformers' pooling), `graph.pbtxt` (the node options
OVMS's export tool writes: pooling, normalize_embeddings, truncate, max_allowed_chunks,
max_position_embeddings, target_device, plugin_config), then the server's config entry or
flags (`task`, `pooling`, `normalize`, `truncate`, `max_allowed_chunks`, ...).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from core.errors import ServingError

TASKS = ("embeddings", "rerank")
POOLINGS = ("CLS", "LAST", "MEAN")
CALCULATORS = {"EmbeddingsCalculatorOV": "embeddings", "RerankCalculatorOV": "rerank"}
DEFAULT_CONTEXT = 1024  # OVMS's when config.json names no context length
CONTEXT_FIELDS = (
    "max_position_embeddings",
    "n_positions",
    "seq_len",
    "seq_length",
    "n_ctx",
    "sliding_window",
)
DEFAULT_MAX_INPUTS = 500
DEFAULT_MAX_CHUNKS = 10000  # OVMS's RerankCalculatorOVOptions default (from Cohere's docs)
_GRAPH_KEYS = {
    "models_path",
    "normalize_embeddings",
    "truncate",
    "pooling",
    "target_device",
    "device",
    "plugin_config",
    "max_allowed_chunks",
    "max_position_embeddings",
    "max_allowed_inputs",
}


@dataclass(frozen=True)
class TaskOptions:
    task: str
    pooling: str = "CLS"
    normalize: bool = True
    truncate: bool = False
    context: int = DEFAULT_CONTEXT  # tokens a sequence may hold
    max_inputs: int = DEFAULT_MAX_INPUTS
    max_chunks: int = DEFAULT_MAX_CHUNKS
    pad_token: int = 0
    vocab_size: int = 0  # config.json's; 0 = unknown
    special: Mapping[str, int] = field(default_factory=dict)  # bos/eos/sep from config.json
    target_device: str = ""  # from graph.pbtxt; "" = the model config's
    plugin_config: Mapping[str, Any] = field(default_factory=dict)


def read(folder: Path, task: str, overrides: Mapping[str, Any]) -> TaskOptions:
    """The options of the version in `folder`; a graph this server cannot run, or a bad
    option, is a ServingError naming the file."""
    graph = parse_graph(folder / "graph.pbtxt") if (folder / "graph.pbtxt").is_file() else {}
    graph_task = graph.pop("__task__", "")
    if task and graph_task and task != graph_task:
        raise ServingError(
            f"graph.pbtxt runs {graph_task}, but the model is configured for task {task}"
        )
    task = task or graph_task
    if task not in TASKS:
        raise ServingError(
            "No task: set task embeddings or rerank, or provide a graph.pbtxt "
            "with EmbeddingsCalculatorOV or RerankCalculatorOV"
        )
    config = _json(folder / "config.json")
    pooling = overrides.get("pooling") or graph.get("pooling") or _st_pooling(folder) or "CLS"
    if pooling not in POOLINGS:
        raise ServingError(f"pooling: {pooling!r} is not one of {', '.join(POOLINGS)}")
    context = graph.get("max_position_embeddings") or _context(config)
    return TaskOptions(
        task=task,
        pooling=pooling,
        normalize=_pick(overrides, "normalize", graph.get("normalize_embeddings"), True),
        truncate=_pick(overrides, "truncate", graph.get("truncate"), False),
        context=int(context),
        max_inputs=int(
            _pick(
                overrides, "max_allowed_inputs", graph.get("max_allowed_inputs"), DEFAULT_MAX_INPUTS
            )
        ),
        max_chunks=int(
            _pick(
                overrides, "max_allowed_chunks", graph.get("max_allowed_chunks"), DEFAULT_MAX_CHUNKS
            )
        ),
        pad_token=int(config.get("pad_token_id") or 0),
        vocab_size=int(config.get("vocab_size") or 0),
        special={
            k: int(config[f"{k}_token_id"])
            for k in ("bos", "eos", "sep")
            if isinstance(config.get(f"{k}_token_id"), int)
        },
        target_device=str(graph.get("target_device") or graph.get("device") or ""),
        plugin_config=_plugin_config(graph.get("plugin_config", "")),
    )


def _pick(overrides: Mapping[str, Any], key: str, graph_value: Any, default: Any) -> Any:
    if overrides.get(key) is not None:
        return overrides[key]
    return default if graph_value is None else graph_value


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        doc = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise ServingError(f"{path.parent.name}/{path.name} is not valid JSON: {exc}") from None
    return doc if isinstance(doc, dict) else {}


def _context(config: Mapping[str, Any]) -> int:
    for name in CONTEXT_FIELDS:
        value = config.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return DEFAULT_CONTEXT


def _st_pooling(folder: Path) -> str:
    """sentence-transformers' 1_Pooling/config.json: exactly one of cls / mean / lasttoken;
    another mode (max, mean_sqrt_len, weightedmean) or an ambiguous file is ignored, as OVMS
    ignores it (with a warning there)."""
    doc = _json(folder / "1_Pooling" / "config.json")
    if any(
        doc.get(k) is True
        for k in (
            "pooling_mode_max_tokens",
            "pooling_mode_mean_sqrt_len_tokens",
            "pooling_mode_weightedmean_tokens",
        )
    ):
        return ""
    found = [
        mode
        for key, mode in (
            ("pooling_mode_cls_token", "CLS"),
            ("pooling_mode_mean_tokens", "MEAN"),
            ("pooling_mode_lasttoken", "LAST"),
        )
        if doc.get(key) is True
    ]
    return found[0] if len(found) == 1 else ""


def _plugin_config(text: Any) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = orjson.loads(text) if isinstance(text, str) else text
    except orjson.JSONDecodeError:
        raise ServingError(f"graph.pbtxt: plugin_config is not valid JSON: {text!r}") from None
    if not isinstance(value, dict):
        raise ServingError("graph.pbtxt: plugin_config must be a JSON object")
    return value


# -- graph.pbtxt -------------------------------------------------------------------------------

_NODE = re.compile(r'calculator\s*:\s*"([^"]+)"')
_OPTION = re.compile(r'(\w+)\s*:\s*("(?:[^"\\]|\\.)*"|\'[^\']*\'|[\w.+-]+)')


def parse_graph(path: Path) -> dict[str, Any]:
    """The task (key `__task__`) and node options of the one calculator a graph.pbtxt runs.
    A graph with another calculator, several nodes or an unknown option is refused."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ServingError(f"graph.pbtxt cannot be read: {type(exc).__name__}") from None
    calculators = _NODE.findall(text)
    if len(calculators) != 1 or calculators[0] not in CALCULATORS:
        found = ", ".join(calculators) or "none"
        raise ServingError(
            f"graph.pbtxt: only a graph of one EmbeddingsCalculatorOV or "
            f"RerankCalculatorOV node is served here; found: {found}"
        )
    body = text[text.index("node_options") :] if "node_options" in text else ""
    body = body[body.index("]") + 1 :] if "]" in body else body
    leftover = re.sub(r"[\s{},]", "", _OPTION.sub("", body).lstrip(" :"))
    if leftover:
        raise ServingError(f"graph.pbtxt: cannot read the node options near {leftover[:40]!r}")
    options: dict[str, Any] = {"__task__": CALCULATORS[calculators[0]]}
    for key, raw in _OPTION.findall(body):
        if key not in _GRAPH_KEYS:
            raise ServingError(f"graph.pbtxt: option {key} is not supported here")
        options[key] = _value(raw)
    models_path = options.get("models_path", "./")
    if str(models_path).strip("./") != "":
        raise ServingError('graph.pbtxt: models_path must be the graph\'s own folder ("./")')
    return options


def _value(raw: str) -> Any:
    if raw[0] in "\"'":
        return raw[1:-1].replace('\\"', '"')
    if raw in ("true", "false"):
        return raw == "true"
    if re.fullmatch(r"-?\d+", raw):
        return int(raw)
    return raw  # an enum: MEAN, CLS, LAST
