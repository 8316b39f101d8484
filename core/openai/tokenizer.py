"""The tokenizer side of a text model: openvino-tokenizers' extension, loaded into the process
Core once, and the token rows a tokenizer model returns."""

from __future__ import annotations

import importlib.util
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.errors import ServingError
from core.runtime.ov_core import ov_core

_extension_lock = threading.Lock()
_extension_loaded = False


def load_tokenizers_extension() -> None:
    """Add openvino-tokenizers' operations to the process Core once (without importing the
    Python package, which patches openvino's classes)."""
    global _extension_loaded
    with _extension_lock:
        if _extension_loaded:
            return
        spec = importlib.util.find_spec("openvino_tokenizers")
        if spec is None or not spec.submodule_search_locations:
            raise ServingError(
                "Text models need the openvino-tokenizers package (pip install openvino-tokenizers)"
            )
        lib = Path(list(spec.submodule_search_locations)[0]) / "lib"
        found = sorted(lib.glob("*openvino_tokenizers.*"))
        if not found:
            raise ServingError("openvino-tokenizers is installed without its extension library")
        ov_core().add_extension(str(found[0]))
        _extension_loaded = True


@dataclass(frozen=True)
class Tokens:
    ids: np.ndarray  # [batch, length] int64, right-padded
    mask: np.ndarray  # [batch, length] int64

    @property
    def lengths(self) -> np.ndarray:
        return self.mask.sum(axis=1)


def right_padded(tokens: Tokens) -> Tokens:
    """Each row's attended tokens first, in order, then its padding. A tokenizer converted
    from one that pads left (Qwen3-Embedding's) pads a batch's shorter rows in front; the
    pooling, truncation and special-token handling here all read rows as right-padded."""
    mask = tokens.mask
    if not (mask[:, :-1] < mask[:, 1:]).any():  # no padding before a token: right-padded
        return tokens
    order = np.argsort(mask == 0, axis=1, kind="stable")
    return Tokens(
        np.take_along_axis(tokens.ids, order, axis=1), np.take_along_axis(mask, order, axis=1)
    )


def trim(tokens: Tokens) -> Tokens:
    """Drop padding columns beyond the longest row (a tokenizer may pad to a fixed size)."""
    width = int(tokens.lengths.max()) if tokens.mask.size else 0
    return Tokens(tokens.ids[:, :width], tokens.mask[:, :width])
