"""infra/azure as the real Azure Functions Python worker library indexes and calls it
(azure-functions-runtime on CPython 3.13, with azure-functions 2.x), configured and not.

Simulated: the Functions host and its gRPC channel (the worker library is driven directly:
index_function_app, then the indexed function with HttpRequest objects).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.handlers.conftest import _CLEARED, ROOT, Repo

SCRIPT = Path(__file__).with_name("azure_worker_index.py")
PREDICT = 'POST /v1/models/scaler:predict {"instances": [[1, 2, 3, 4]]}'


def _worker_python() -> str:
    python = Path(
        os.environ.get("OVS_AZURE_WORKER_PYTHON") or ROOT / ".ci" / "py313" / "bin" / "python"
    )
    if not python.exists():
        pytest.skip("no Azure worker environment: run infra/ci/azure-worker-python.sh")
    return str(python)


def index_and_call(env: dict[str, str], *calls: str) -> dict[str, Any]:
    proc = subprocess.run(
        [_worker_python(), str(SCRIPT), str(ROOT / "infra" / "azure"), *calls],
        env=env | {"PYTHONPATH": str(ROOT)},
        cwd=ROOT / "infra" / "azure",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _env(repo: Repo) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _CLEARED} | repo.env()


def test_worker_indexes_the_catch_all_route_and_serves(repo: Repo) -> None:
    result = index_and_call(_env(repo), "GET /v2/health/ready", PREDICT)
    (function,) = result["functions"]
    trigger = next(b for b in function["bindings"] if b["type"] == "httpTrigger")
    assert trigger["route"] == "{*path}" and trigger["authLevel"].upper() == "ANONYMOUS"
    ready, predict = result["calls"]
    assert ready["status"] == 200
    assert predict["status"] == 200
    assert json.loads(predict["body"]) == {"predictions": [[2.0, 4.0, 6.0, 8.0]]}


def test_misconfigured_app_still_indexes_and_answers_503(repo: Repo) -> None:
    env = {k: v for k, v in _env(repo).items() if k != "OVS_CONFIG_PATH"}
    result = index_and_call(env, "GET /v2/health/ready", PREDICT)
    assert len(result["functions"]) == 1
    for call in result["calls"]:
        assert call["status"] == 503
        assert "OVS_CONFIG_PATH" in json.loads(call["body"])["error"]
