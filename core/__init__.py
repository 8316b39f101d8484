"""The serving core. Importing it imports openvino without its model-conversion tool.

`import openvino` also imports `openvino.tools.ovc` (convert_model), which reads package
metadata and sets up telemetry: 70 ms of a cold start on the bench machine, for a function a
server never calls. openvino's __init__ skips it on ImportError, so while openvino is first
imported here, that one module is reported missing. `import openvino.tools.ovc` still works
afterwards (`ov.convert_model` is then `openvino.tools.ovc.convert_model`).
Set OVS_IMPORT_OVC=1 to import openvino as is.
"""

from __future__ import annotations

import importlib.abc
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

_OVC = "openvino.tools.ovc"


class _SkipOvc(importlib.abc.MetaPathFinder):
    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name == _OVC:
            raise ImportError(f"{_OVC} is not imported at serving start (core/__init__.py)")
        return None


def _import_openvino() -> None:
    if "openvino" in sys.modules or os.environ.get("OVS_IMPORT_OVC") == "1":
        return
    finder = _SkipOvc()
    sys.meta_path.insert(0, finder)
    try:
        import openvino  # noqa: F401
    finally:
        sys.meta_path.remove(finder)


_import_openvino()
