"""The process's one ov.Core: device plugins loaded once, custom-op extensions added once, and
the bindings' numpy glue initialised before any request converts an array."""

from __future__ import annotations

import logging
import os
import threading

import numpy as np
import openvino as ov

from core.errors import ConfigError

log = logging.getLogger("ov_serverless.model")


_core: ov.Core | None = None
_core_lock = threading.Lock()


def ov_core() -> ov.Core:
    """One ov.Core per process: device plugins are loaded once."""
    global _core
    with _core_lock:
        if _core is None:
            _core = ov.Core()
            _init_numpy_bindings()
        return _core


_extensions: set[str] = set()


def add_extension(path: str) -> None:
    """OVMS's --cpu_extension: a library of custom operations, added to the process's Core
    once and before any model is read (an IR names its custom ops by type)."""
    if not path or path in _extensions:
        return
    if not os.path.exists(path):
        raise ConfigError(
            "File path provided as an --cpu_extension parameter does not exist "
            f"in the filesystem: {path}"
        )
    try:
        ov_core().add_extension(path)
    except RuntimeError as exc:
        raise ConfigError(f"Custom CPU extension loading has failed! Reason: {exc}") from None
    _extensions.add(path)
    log.info("Custom CPU extension loaded: %s", path)


def _init_numpy_bindings() -> None:
    """Initialise the bindings' numpy glue (pybind11's npy_api and _pyopenvino's dtype
    statics) once, on one thread. Left to the first requests, two threads that convert their
    first arrays at the same moment can deadlock: one holds a C++ static-init guard while it
    waits for the GIL, the other holds the GIL while it waits for that guard (seen as a server
    that stops answering when concurrent first predicts hit a model read from disk)."""
    ov.Type.f32.to_dtype()
    ov.Tensor(np.zeros(1, np.float32), shared_memory=True)


def shares_inputs(compiled: ov.CompiledModel) -> bool:
    """May an inference of `compiled` read the caller's arrays in place (share_inputs)? Only
    when every input is static: OpenVINO 2026.4's CPU plugin crashes (SIGSEGV, within a few
    dozen inferences) when a model with a dynamic input passes it straight to an output (an
    echo, a Convert to the same type) and the input is shared, so such compiles copy it."""
    return all(port.get_partial_shape().is_static for port in compiled.inputs)
