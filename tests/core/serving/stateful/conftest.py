"""Stateful models for the sequence tests: an accumulator (ReadValue/Assign) served with
`stateful: true` in several configs, an in-process App, and the request bodies OVMS documents."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops
from openvino.op.util import Variable, VariableInfo

from core.api import App
from demo.models import save
from tests.core.serving.pipeline.helpers import app_for


def accumulator(width: int = 4) -> ov.Model:
    """x [1,width] f32 -> sum [1,width]: the running sum of x over the sequence's requests."""
    x = ops.parameter([1, width], np.float32, name="x")
    x.output(0).set_names({"x"})
    info = VariableInfo()
    info.data_shape = ov.PartialShape([1, width])
    info.data_type = ov.Type.f32
    info.variable_id = "running_sum"
    variable = Variable(info)
    previous = ops.read_value(ops.constant(np.zeros((1, width), np.float32)), variable)
    total = ops.add(previous, x)
    total.output(0).set_names({"sum"})
    assign = ops.assign(total, variable)
    return ov.Model([ops.result(total)], [assign], [x], "accumulator")


# name -> extra config; every one serves the accumulator as a stateful model
MODELS: dict[str, dict[str, Any]] = {
    "acc": {},
    "acc_one": {"max_sequence_number": 1},
    "acc_idle": {},
    "acc_low_latency": {"low_latency_transformation": True},
}


@dataclass(frozen=True)
class Repo:
    root: Path
    config: Path


@pytest.fixture(scope="session")
def stateful_repo(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    root = tmp_path_factory.mktemp("stateful")
    save(accumulator(), root / "accumulator" / "1")
    entries = [
        {"config": {"name": name, "base_path": "accumulator", "stateful": True, **extra}}
        for name, extra in MODELS.items()
    ]
    config = root / "config.json"
    config.write_text(json.dumps({"model_config_list": entries}))
    return Repo(root, config)


@pytest.fixture(scope="session")
def app(stateful_repo: Repo, tmp_path_factory: pytest.TempPathFactory) -> App:
    return app_for(stateful_repo.config, tmp_path_factory.mktemp("stateful-cache"))


def tfs_body(
    x: list[float], sequence_id: int | None = None, control: int | None = None
) -> dict[str, Any]:
    inputs: dict[str, Any] = {"x": [x]}
    if sequence_id is not None:
        inputs["sequence_id"] = [sequence_id]
    if control is not None:
        inputs["sequence_control_input"] = [control]
    return {"inputs": inputs}
