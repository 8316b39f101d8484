"""Trace one warm TF Serving REST predict through the Lambda handler, at runtime.

Builds a one-model repository (demo.models.scaler, `x` [-1,4] f32) in a temporary folder, imports
handlers.aws_lambda with OVS_MODEL_NAME/OVS_MODEL_PATH pointing at it, answers one API Gateway
HTTP API (payload 2.0) predict as the warm-up, then records the second one with sys.setprofile:

- project calls: Python function calls whose code lives in core/ or handlers/;
- transitions: consecutive project calls on the way down or up whose modules differ;
- re-entered modules: modules entered again, on the way down (deeper in the call stack), after
  the line left them for another project module (A -> B -> A).

The main line printed is the chain of project modules open when the request first calls into
OpenVINO, which should read handler -> router -> data plane -> servable -> OpenVINO.

    PYTHONPATH=$PWD .venv/bin/python bench/trace_predict.py [--calls]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROJECT = (str(ROOT / "core") + os.sep, str(ROOT / "handlers") + os.sep)
OPENVINO = f"{os.sep}openvino{os.sep}"
EVENT = ROOT / "tests" / "events" / "powertools" / "apiGatewayProxyV2Event.json"


def _event() -> dict[str, Any]:
    event: dict[str, Any] = json.loads(EVENT.read_text())
    event["rawPath"] = "/v1/models/scaler:predict"
    event["requestContext"]["http"]["method"] = "POST"
    event["requestContext"]["http"]["path"] = "/v1/models/scaler:predict"
    event["requestContext"].pop("stage", None)
    event["body"] = json.dumps({"instances": [[1.0, 2.0, 3.0, 4.0]]})
    event["isBase64Encoded"] = False
    event["headers"] = {"content-type": "application/json"}
    event["cookies"] = []
    return event


def _module(filename: str) -> str:
    relative = Path(filename).resolve().relative_to(ROOT).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


class Tracer:
    """Records project calls as (depth, module, function), and the project call chain at the
    first call into OpenVINO (the main line)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str, str]] = []
        self.depth = 0
        self.main_line: list[str] = []

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            self.depth += 1
            filename = frame.f_code.co_filename
            if filename.startswith(PROJECT):
                self.calls.append((self.depth, _module(filename), frame.f_code.co_qualname))
            elif not self.main_line and OPENVINO in filename:
                self.main_line = [*_chain(self.calls, self.depth), "openvino"]
        elif event == "return":
            self.depth -= 1


def _chain(calls: list[tuple[int, str, str]], depth: int) -> list[str]:
    """The modules of the project calls open below a call at `depth`, consecutive repeats folded."""
    chain: list[tuple[int, str]] = []
    for call_depth, module, _ in calls:
        while chain and chain[-1][0] >= call_depth:
            chain.pop()
        chain.append((call_depth, module))
    modules = [m for d, m in chain if d < depth]
    return [m for i, m in enumerate(modules) if i == 0 or modules[i - 1] != m]


def analyse(calls: list[tuple[int, str, str]]) -> dict[str, Any]:
    """Counts of one trace: calls, module transitions, modules re-entered on the way down."""
    transitions = sum(1 for a, b in zip(calls, calls[1:], strict=False) if a[1] != b[1])
    chain: list[tuple[int, str]] = []  # (depth, module) of the current call chain
    reentered: set[str] = set()
    for depth, module, _ in calls:
        while chain and chain[-1][0] >= depth:
            chain.pop()
        if chain and chain[-1][1] != module and module in {m for _, m in chain}:
            reentered.add(module)
        chain.append((depth, module))
    return {
        "project_calls": len(calls),
        "modules": len({module for _, module, _ in calls}),
        "transitions": transitions,
        "reentered_modules": sorted(reentered),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", action="store_true", help="print every project call")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from demo.models import save, scaler

    with tempfile.TemporaryDirectory() as folder:
        save(scaler(2.0), Path(folder) / "scaler" / "1")
        os.environ.update(
            {
                "OVS_MODEL_NAME": "scaler",
                "OVS_MODEL_PATH": str(Path(folder) / "scaler"),
                "OVS_CACHE_DIR": str(Path(folder) / "cache"),
                "OVS_LOG_LEVEL": "ERROR",
            }
        )
        from handlers import aws_lambda

        warm = aws_lambda.handler(_event(), None)
        assert warm["statusCode"] == 200, warm
        tracer = Tracer()
        sys.setprofile(tracer)
        try:
            reply = aws_lambda.handler(_event(), None)
        finally:
            sys.setprofile(None)
        assert reply["statusCode"] == 200, reply
    figures = {**analyse(tracer.calls), "main_line": tracer.main_line}
    if args.calls:
        for depth, module, function in tracer.calls:
            print(f"{'  ' * min(depth, 40)}{module}.{function}")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
