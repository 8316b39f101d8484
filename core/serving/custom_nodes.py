"""Python custom nodes for pipelines, with the lifecycle of OVMS's custom node C API.

A custom node library is a Python file (or an importable module name) that defines:

    def initialize(params: dict[str, str]) -> object          # optional; once per pipeline load
    def execute(inputs: dict[str, np.ndarray], params: dict[str, str], state: object)
        -> dict[str, np.ndarray]                              # required; once per request
    def deinitialize(state: object) -> None                   # optional; at unload
    def inputs_info(params) / outputs_info(params)            # optional; {name: (dtype, shape)}

so users write pre/post-processing in Python without compiling anything. String (BYTES)
tensors reach execute() as object arrays of bytes; it may return strings as str or bytes, in a
list or an array of dtype object, "U" or "S".
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from core.errors import ConfigError, InternalError, ServingError, relative
from core.tensors import dtypes
from core.tensors.shapes import Dims, parse_dims
from core.tensors.spec import TensorSpec

log = logging.getLogger("ov_serverless.custom_nodes")


class BrokenLibrary:
    """Stands in for a library that failed to load: the pipelines that use it fail validation
    with this message; the rest of the config keeps serving."""

    def __init__(self, message: str) -> None:
        self.message = message


def load_library(name: str, base_path: str) -> ModuleType | BrokenLibrary:
    """Import a custom node library from a .py file path or a module name; a library that
    cannot be imported, or defines no execute(), comes back as a BrokenLibrary."""
    try:
        return _import(name, base_path)
    except ConfigError as exc:
        log.error("%s", exc.message)
        # clients see `boxes_node.py`, never the server's absolute paths (the log keeps them)
        folder = Path(base_path).parent if base_path.endswith(".py") else ""
        return BrokenLibrary(relative(exc.message, folder) if folder else exc.message)


def _import(name: str, base_path: str) -> ModuleType:
    try:
        if base_path.endswith(".py"):
            path = Path(base_path)
            digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]
            spec = importlib.util.spec_from_file_location(f"ovs_custom_{name}_{digest}", path)
            if spec is None or spec.loader is None:
                raise ConfigError(f"Custom node library {name}: cannot load {base_path}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module  # @dataclass and pickle look a module up by name
            try:
                spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(spec.name, None)
                raise
        else:
            module = importlib.import_module(base_path)
    except ServingError:
        raise
    except Exception as exc:  # user code: report any failure as a config problem
        raise ConfigError(
            f"Custom node library {name} ({base_path}) failed to load: {type(exc).__name__}: {exc}"
        ) from exc
    if not callable(getattr(module, "execute", None)):
        raise ConfigError(f"Custom node library {name} ({base_path}) defines no execute()")
    return module


class CustomNode:
    """One node instance: a library plus its params, initialized once."""

    def __init__(self, node_name: str, library: ModuleType, params: Mapping[str, str]) -> None:
        self.name = node_name
        self.library: Any = library
        self.params = dict(params)
        init: Callable[..., Any] | None = getattr(library, "initialize", None)
        try:
            self.state = init(self.params) if init else None
        except Exception as exc:  # user code: the pipeline fails to load, the server stays up
            raise ConfigError(
                f"Custom node {node_name}: initialize() failed: {type(exc).__name__}: {exc}"
            ) from exc

    def execute(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            outputs = self.library.execute(inputs, self.params, self.state)
        except ServingError:
            raise
        except Exception as exc:  # a broken node fails its request, not the server
            raise InternalError(
                f"Custom node {self.name} failed: {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(outputs, dict):
            raise InternalError(f"Custom node {self.name} must return a dict of arrays")
        return {key: self._array(key, value) for key, value in outputs.items()}

    def _array(self, key: str, value: Any) -> np.ndarray:
        """An output as the servers take it: strings (str or bytes, in a list or an array of
        dtype object, "U" or "S") become the object array of bytes every encoder reads."""
        array = np.asarray(value)
        if not dtypes.is_strings(array):
            return array
        try:
            return dtypes.as_bytes_array(array)
        except TypeError as exc:
            raise InternalError(f"Custom node {self.name} output {key}: {exc}") from None

    def specs(self, kind: str) -> dict[str, TensorSpec]:
        """Declared inputs_info / outputs_info, as TensorSpecs (empty when not declared)."""
        info: Callable[..., Any] | None = getattr(self.library, f"{kind}_info", None)
        if info is None:
            return {}
        try:
            declared = info(self.params)
            return {
                name: TensorSpec(name, dtypes.from_kserve(dtype), _dims(shape, name))
                for name, (dtype, shape) in declared.items()
            }
        except ServingError as exc:
            raise ConfigError(f"Custom node {self.name} {kind}_info: {exc.message}") from exc
        except Exception as exc:  # user code: a bad declaration fails the pipeline's load
            raise ConfigError(
                f"Custom node {self.name} {kind}_info: must return "
                "{name: (datatype, shape)}; "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    def close(self) -> None:
        """deinitialize(state), once; a failure is logged (unloading must go on)."""
        deinit: Callable[..., Any] | None = getattr(self.library, "deinitialize", None)
        self.library, library = _Closed(), self.library
        if deinit is None or isinstance(library, _Closed):
            return
        try:
            deinit(self.state)
        except Exception:  # user code must not stop an unload or a reload
            log.exception("Custom node %s: deinitialize() failed", self.name)


class _Closed:
    """The library of a node after close(): a late request fails cleanly."""

    def execute(self, *args: Any) -> dict[str, np.ndarray]:
        raise InternalError("Custom node was unloaded")


def _dims(shape: Any, name: str) -> Dims:
    try:
        return parse_dims(list(shape), f"custom node info {name}")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
