"""Python custom nodes for pipelines, with the lifecycle of OVMS's custom node C API.

A custom node library is a Python file (or an importable module name) that defines:

    def initialize(params: dict[str, str]) -> object          # optional; once per pipeline load
    def execute(inputs: dict[str, np.ndarray], params: dict[str, str], state: object)
        -> dict[str, np.ndarray]                              # required; once per request
    def deinitialize(state: object) -> None                   # optional; at unload
    def inputs_info(params) / outputs_info(params)            # optional; {name: (dtype, shape)}

so users write pre/post-processing in Python without compiling anything.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from core import tensors
from core.errors import ConfigError, InternalError, ServingError
from core.shapes import Dims, parse_dims
from core.signature import TensorSpec


def load_library(name: str, base_path: str) -> ModuleType:
    """Import a custom node library from a .py file path or a module name."""
    try:
        if base_path.endswith(".py"):
            path = Path(base_path)
            digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]
            spec = importlib.util.spec_from_file_location(f"ovs_custom_{name}_{digest}", path)
            if spec is None or spec.loader is None:
                raise ConfigError(f"Custom node library {name}: cannot load {base_path}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(base_path)
    except ServingError:
        raise
    except Exception as exc:  # user code: report any failure as a config problem
        raise ConfigError(f"Custom node library {name} ({base_path}) failed to load: "
                          f"{type(exc).__name__}: {exc}") from exc
    if not callable(getattr(module, "execute", None)):
        raise ConfigError(f"Custom node library {name} ({base_path}) defines no execute()")
    return module


class CustomNode:
    """One node instance: a library plus its params, initialized once."""

    def __init__(self, node_name: str, library: ModuleType, params: Mapping[str, str]) -> None:
        self.name = node_name
        self.library = library
        self.params = dict(params)
        init: Callable[..., Any] | None = getattr(library, "initialize", None)
        self.state = init(self.params) if init else None

    def execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            outputs = self.library.execute(inputs, self.params, self.state)
        except ServingError:
            raise
        except Exception as exc:  # a broken node fails its request, not the server
            raise InternalError(f"Custom node {self.name} failed: "
                                f"{type(exc).__name__}: {exc}") from exc
        if not isinstance(outputs, dict):
            raise InternalError(f"Custom node {self.name} must return a dict of arrays")
        return {key: np.asarray(value) for key, value in outputs.items()}

    def specs(self, kind: str) -> dict[str, TensorSpec]:
        """Declared inputs_info / outputs_info, as TensorSpecs (empty when not declared)."""
        info: Callable[..., Any] | None = getattr(self.library, f"{kind}_info", None)
        if info is None:
            return {}
        declared = info(self.params)
        return {name: TensorSpec(name, tensors.from_kserve(dtype), _dims(shape, name))
                for name, (dtype, shape) in declared.items()}

    def close(self) -> None:
        deinit: Callable[..., Any] | None = getattr(self.library, "deinitialize", None)
        if deinit:
            deinit(self.state)


def _dims(shape: Any, name: str) -> Dims:
    try:
        return parse_dims(list(shape), f"custom node info {name}")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
