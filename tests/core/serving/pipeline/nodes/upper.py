"""texts = upper-cased text, returned as params["kind"] says: "unicode" (numpy "U"), "object"
(an object array of str), "bytes" (an object array of bytes) or "list" (a list of str), as the
custom nodes of users return strings. "bad" returns an object array holding an int."""

from __future__ import annotations

from typing import Any

import numpy as np


def inputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"text": ("BYTES", [-1])}


def outputs_info(params: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    return {"texts": ("BYTES", [-1])}


def execute(inputs: dict[str, np.ndarray], params: dict[str, str], state: Any) -> dict[str, Any]:
    words = [item.decode("utf-8").upper() for item in inputs["text"]]
    kind = params.get("kind", "unicode")
    if kind == "unicode":
        return {"texts": np.array(words)}
    if kind == "list":
        return {"texts": words}
    out = np.empty(len(words), dtype=object)
    if kind == "bytes":
        out[:] = [word.encode("utf-8") for word in words]
    elif kind == "bad":
        out[:] = [len(word) for word in words]
    else:
        out[:] = words
    return {"texts": out}
