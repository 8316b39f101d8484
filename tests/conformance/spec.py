"""The Open Inference Protocol's REST OpenAPI file, as schemathesis tests it against `serve`.

`open_inference_rest.yaml` beside this module is an unchanged copy of
kserve/open-inference-protocol `specification/protocol/open_inference_rest.yaml`. `load()`
applies a small transform in memory, so the copy can be compared with upstream as is:

1. Path templates: `${MODEL_NAME}` / `${MODEL_VERSION}` become OpenAPI's `{MODEL_NAME}` /
   `{MODEL_VERSION}` (the file uses the markdown spec's notation, which OpenAPI tools read as
   a literal `$` followed by a template).
2. Version-less routes: the protocol says the version part of a model URL is optional, but the
   file lists only `/versions/{MODEL_VERSION}` routes; each gets a twin without it.
3. Path parameters name what is served: MODEL_NAME one of `models`, MODEL_VERSION a version
   number, so generated requests reach the models instead of stopping at "not found".
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

SPEC = Path(__file__).with_name("open_inference_rest.yaml")
VERSION_PART = "/versions/{MODEL_VERSION}"


def load(models: list[str], versions: list[str]) -> dict[str, Any]:
    doc = yaml.safe_load(SPEC.read_text())
    paths: dict[str, Any] = {}
    for template, item in doc["paths"].items():
        path = template.replace("${", "{")
        paths[path] = _named(item, models, versions)
        if VERSION_PART in path:
            paths[path.replace(VERSION_PART, "")] = _without_version(paths[path])
    doc["paths"] = paths
    return doc


def _named(item: dict[str, Any], models: list[str], versions: list[str]) -> dict[str, Any]:
    item = copy.deepcopy(item)
    for param in item.get("parameters", []):
        if param["name"] == "MODEL_NAME":
            param["schema"] = {"type": "string", "enum": models}
        elif param["name"] == "MODEL_VERSION":
            param["schema"] = {"type": "string", "enum": versions}
    return item


def _without_version(item: dict[str, Any]) -> dict[str, Any]:
    twin = copy.deepcopy(item)
    twin["parameters"] = [p for p in twin.get("parameters", []) if p["name"] != "MODEL_VERSION"]
    for operation in twin.values():
        if isinstance(operation, dict) and "operationId" in operation:
            operation["operationId"] += "-latest"
    return twin
