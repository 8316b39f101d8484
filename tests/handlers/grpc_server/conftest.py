"""Fixtures: one model repository and real `ov-serverless serve` processes speaking gRPC.

`server` serves REST and gRPC (one process, gRPC beside REST); `small_server` is gRPC only
(--rest_port 0) with 2 gRPC workers and a 1 MiB message limit.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.handlers.grpc_server.helpers import Server, build_repository

SMALL_LIMIT = 1 << 20


@pytest.fixture(scope="session")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("grpc-repo")).parent


@pytest.fixture(scope="session")
def server(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = Server.start(repo / "config.json", tmp_path_factory.mktemp("grpc-server"))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="session")
def small_server(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = Server.start(
        repo / "config.json",
        tmp_path_factory.mktemp("grpc-small"),
        "--grpc_workers",
        "2",
        "--grpc_max_message_bytes",
        str(SMALL_LIMIT),
        rest=False,
    )
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def channel(server: Server) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.target) as opened:
        yield opened
