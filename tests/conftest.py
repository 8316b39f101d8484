"""Shared fixtures: real models saved as IR/ONNX in temporary repositories, and real
`ov-serverless serve` subprocesses on free 127.0.0.1 ports (ready-checked, killed at the end).

`zoo` / `zoo_server` are one standard repository and one server for the whole session, used by
every module that needs no special config; `server_factory` starts module-private servers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from core.logs import JsonFormatter
from demo import models
from tests.core.helpers import (
    RunningServer,
    Zoo,
    classifier,
    classifier_nhwc,
    save_ir,
    save_onnx_classifier,
    write_config,
)

ServerFactory = Callable[..., RunningServer]


@pytest.fixture(autouse=True)
def root_logging() -> Iterator[None]:
    """Undo core.logs.configure after a test that ran the CLI in-process: its handler holds
    the test's captured stderr, which is closed once the test ends, and a background thread
    that logs later (a version retiring) would hit it ("Logging error")."""
    root = logging.getLogger()
    level = root.level
    yield
    for handler in [h for h in root.handlers if isinstance(h.formatter, JsonFormatter)]:
        root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture(scope="session")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> Zoo:
    root = tmp_path_factory.mktemp("zoo")
    built = {
        "classifier": classifier(batch=1),
        "classifier_dyn": classifier(batch=None),
        "classifier_nhwc": classifier_nhwc(batch=None),
        "two_inputs": models.two_inputs(),
        "scaler": models.scaler(3.0),
    }
    for name, model in built.items():
        save_ir(model, root / name / "1")
    onnx_path = save_onnx_classifier(root / "classifier_onnx" / "1" / "classifier.onnx")
    config = write_config(
        root / "config.json",
        [{"name": name, "base_path": name} for name in [*built, "classifier_onnx"]],
    )
    return Zoo(root, config, classifier_onnx=onnx_path, **built)


@pytest.fixture(scope="session")
def zoo_server(zoo: Zoo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    server = RunningServer(zoo.config, tmp_path_factory.mktemp("zoo-server"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def server_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerFactory]:
    """start(config_path, *extra_args, env=None) -> a ready RunningServer, stopped at the end
    of the module."""
    started: list[RunningServer] = []

    def start(
        config_path: Path, *extra_args: str, env: dict[str, str] | None = None
    ) -> RunningServer:
        server = RunningServer(config_path, tmp_path_factory.mktemp("server"), extra_args, env)
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()
