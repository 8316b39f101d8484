"""Fixtures: one repository (scaler x3, classifier_nhwc for images, slow for timing) and one
`ov-serverless serve` speaking REST and gRPC with small, explicit limits."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.core.helpers import RunningServer
from tests.reliability.helpers import LIMIT_ENV, build_repository, free_port


@pytest.fixture(scope="session")
def rel_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("rel-repo"))


@pytest.fixture(scope="session")
def limited(rel_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """REST + gRPC (server.grpc_target), 1 MiB body/message limits, 1M elements / 2 MB per
    tensor, 1M image pixels."""
    grpc_port = free_port()
    server = RunningServer(
        rel_repo / "config.json",
        tmp_path_factory.mktemp("rel-server"),
        (
            "--port",
            str(grpc_port),
            "--grpc_bind_address",
            "127.0.0.1",
            "--max_request_bytes",
            str(1 << 20),
            "--grpc_max_message_bytes",
            str(1 << 20),
            "--log_level",
            "DEBUG",
        ),
        env=LIMIT_ENV,
    )
    server.grpc_target = f"127.0.0.1:{grpc_port}"  # type: ignore[attr-defined]
    try:
        yield server
    finally:
        server.stop()
