"""mapping_config.json: rename a version's inputs/outputs, as OVMS does.

{"inputs": {"<tensor name>": "<served name>"}, "outputs": {...}}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import orjson

from core.errors import ServingError

FILE_NAME = "mapping_config.json"


@dataclass(frozen=True)
class Aliases:
    inputs: dict[str, str] = field(default_factory=dict)  # model name -> served name
    outputs: dict[str, str] = field(default_factory=dict)


def load(folder: Path) -> Aliases:
    path = folder / FILE_NAME
    if not path.is_file():
        return Aliases()
    try:
        doc = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise ServingError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or set(doc) - {"inputs", "outputs"}:
        raise ServingError(f"{path}: only 'inputs' and 'outputs' maps are allowed")
    return Aliases(_names(doc.get("inputs", {}), path), _names(doc.get("outputs", {}), path))


def _names(value: object, path: Path) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in value.items()
    ):
        raise ServingError(f"{path}: each map must be of tensor name to served name")
    return dict(value)
