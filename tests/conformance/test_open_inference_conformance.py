"""Conformance with the Open Inference Protocol's REST spec: schemathesis (all its phases and
default checks) drives `ov-serverless serve` with several models from the spec (see spec.py for
the transform), bounded in examples and time. No 5xx and no response-schema, content-type or
status-code violation other than the documented spec gaps (checker.SPEC_GAPS) may appear; a
server with a planted 500 must fail the same check."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from demo import models
from tests.conformance import checker
from tests.conftest import ServerFactory
from tests.core.helpers import RunningServer, Zoo, save_ir, write_config

pytest.importorskip("schemathesis")

MAX_EXAMPLES = 12  # per operation and phase
MAX_TIME = 150  # seconds for the whole run; schemathesis stops generating after it
SEED = 39


def test_serve_conforms_to_the_open_inference_rest_spec(
    zoo: Zoo, zoo_server: RunningServer, tmp_path: Path
) -> None:
    models = ["scaler", "two_inputs", "classifier_dyn", "classifier_onnx"]
    spec_path = checker.write_spec(tmp_path / "spec.yaml", models, ["1"])
    (tmp_path / "report").mkdir()
    result = checker.run(
        zoo_server.url,
        spec_path,
        tmp_path / "report",
        max_examples=MAX_EXAMPLES,
        max_time=MAX_TIME,
        seed=SEED,
    )
    print("schemathesis:", result.summary())
    assert result.operations == 9
    assert result.test_cases > 100
    worst_first = sorted(result.failures, key=lambda case: "[5" not in case)
    assert not result.failures, "\n\n".join(worst_first[:8])


PLANTED = """
from core.codecs import documents

def _planted(*args, **kwargs):
    raise RuntimeError("planted fault")

documents.server_metadata = _planted
"""


def test_a_planted_500_fails_the_check(server_factory: ServerFactory, tmp_path: Path) -> None:
    """`GET /v2/` raises inside the server (a sitecustomize patch): the run must report it."""
    fault = tmp_path / "fault"
    fault.mkdir()
    (fault / "sitecustomize.py").write_text(PLANTED)
    path = os.pathsep.join([str(fault), os.environ.get("PYTHONPATH", str(Path.cwd()))])
    save_ir(models.scaler(3.0), tmp_path / "repo" / "scaler" / "1")
    config = write_config(
        tmp_path / "repo" / "config.json", [{"name": "scaler", "base_path": "scaler"}]
    )
    server = server_factory(config, env={"PYTHONPATH": path})
    assert server.get("/v2").status_code == 500
    spec_path = checker.write_spec(tmp_path / "spec.yaml", ["scaler"], ["1"])
    (tmp_path / "report").mkdir()
    result = checker.run(
        server.url,
        spec_path,
        tmp_path / "report",
        max_examples=3,
        max_time=60,
        seed=SEED,
        extra=("--include-path", "/v2/", "--max-failures", "1"),
    )
    print("schemathesis (planted 500):", result.summary())
    assert result.failures and all("[500]" in case for case in result.failures)
    assert any(kind.endswith(" 500") for kind in result.kinds)
