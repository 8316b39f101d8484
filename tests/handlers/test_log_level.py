"""OVS_LOG_LEVEL (template LogLevel, the Dockerfiles' ENV, service.yaml, deployment.yaml) is
honoured by every entry point; for the CLI a --log_level flag wins over it."""

from __future__ import annotations

import json
import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path

import functions_framework
import pytest

from handlers import aws_lambda, azure_functions
from tests.handlers.conftest import (
    BIN,
    ROOT,
    LambdaContext,
    Repo,
    free_port,
    load_event,
    running,
    server_env,
)


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    """The handlers reconfigure the root logger as on their platform; restore it after."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield root
    root.handlers[:] = handlers
    root.setLevel(level)


def _json_levels(text: str) -> set[str]:
    levels = set()
    for line in text.splitlines():
        if line.startswith("{") and '"level"' in line:
            levels.add(json.loads(line)["level"])
    return levels


def test_lambda_handler(
    serving_env: pytest.MonkeyPatch, root_logger: logging.Logger, capsys: pytest.CaptureFixture[str]
) -> None:
    serving_env.setenv("OVS_LOG_LEVEL", "DEBUG")
    handler = aws_lambda.build()
    assert root_logger.level == logging.DEBUG
    handler(load_event("powertools/apiGatewayProxyV2Event", "/v2/health/ready"), LambdaContext())
    assert "DEBUG" in _json_levels(capsys.readouterr().err)  # the router's request line

    serving_env.setenv("OVS_LOG_LEVEL", "warning")
    aws_lambda.build()
    assert root_logger.level == logging.WARNING
    assert _json_levels(capsys.readouterr().err) <= {"WARNING", "ERROR"}  # no load INFO lines


def test_functions_framework(
    serving_env: pytest.MonkeyPatch, root_logger: logging.Logger, capsys: pytest.CaptureFixture[str]
) -> None:
    serving_env.setenv("OVS_LOG_LEVEL", "DEBUG")
    client = functions_framework.create_app(
        "predict", str(ROOT / "handlers" / "cloud_run.py")
    ).test_client()
    assert root_logger.level == logging.DEBUG
    assert client.get("/v2/health/live").status_code == 200
    assert "DEBUG" in _json_levels(capsys.readouterr().err)
    serving_env.setenv("OVS_LOG_LEVEL", "ERROR")
    functions_framework.create_app("predict", str(ROOT / "handlers" / "cloud_run.py"))
    assert root_logger.level == logging.ERROR


def test_azure_function(serving_env: pytest.MonkeyPatch, root_logger: logging.Logger) -> None:
    """The level only: the Python worker's own handler on the root logger stays, since it
    is what forwards records to the Functions host."""
    worker_handler = logging.NullHandler()
    root_logger.addHandler(worker_handler)
    serving_env.setenv("OVS_LOG_LEVEL", "ERROR")
    azure_functions.build()
    assert root_logger.level == logging.ERROR
    assert worker_handler in root_logger.handlers


def _invoke(env: dict[str, str], *flags: str) -> set[str]:
    proc = subprocess.run(
        [str(BIN / "ov-serverless"), "invoke", "GET", "/v2/health/ready", *flags],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return _json_levels(proc.stderr)


def test_cli_flag_over_env_over_default(repo: Repo) -> None:
    assert "DEBUG" in _invoke(server_env(repo, OVS_LOG_LEVEL="DEBUG"))
    assert _invoke(server_env(repo, OVS_LOG_LEVEL="DEBUG"), "--log_level", "ERROR") == set()
    default = _invoke(server_env(repo))
    assert "INFO" in default and "DEBUG" not in default


def _serve_levels(env: dict[str, str], logs: Path) -> set[str]:
    port = free_port()
    command = [str(BIN / "ov-serverless"), "serve", "--rest_port", str(port)]
    logs.mkdir()
    with running({"serve": (command, port)}, env, logs):
        pass
    return _json_levels((logs / "serve.log").read_text())


def test_serve_reads_the_env(repo: Repo, tmp_path: Path) -> None:
    assert "INFO" in _serve_levels(server_env(repo), tmp_path / "default")  # model load lines
    assert "INFO" not in _serve_levels(
        server_env(repo, OVS_LOG_LEVEL="WARNING"), tmp_path / "warning"
    )
