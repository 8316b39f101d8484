"""A version or model that fails to load is reported over the public APIs with paths relative
to the model's base path, never with the server's absolute paths."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from demo import models
from protos.gen.kserve import grpc_predict_v2_pb2 as kfs
from protos.gen.kserve import grpc_predict_v2_pb2_grpc
from protos.gen.tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc
from tests.core.helpers import RunningServer, free_port, save_ir, write_config

FAILED = ("no_file", "corrupt", "missing", "empty")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("status-paths")
    save_ir(models.scaler(1.0), root / "good" / "1")
    (root / "no_file" / "1").mkdir(parents=True)
    (root / "no_file" / "1" / "README.md").write_text("the model file is missing")
    (root / "corrupt" / "1").mkdir(parents=True)
    (root / "corrupt" / "1" / "model.xml").write_text("<net><layers><broken")
    (root / "corrupt" / "1" / "model.bin").write_bytes(b"\0" * 8)
    (root / "empty").mkdir()
    write_config(
        root / "config.json",
        [
            {"name": "good", "base_path": "good"},
            {"name": "no_file", "base_path": str(root / "no_file")},
            {"name": "corrupt", "base_path": "corrupt"},
            {"name": "missing", "base_path": str(root / "missing")},
            {"name": "empty", "base_path": "empty"},
        ],
    )
    return root


@pytest.fixture(scope="module")
def grpc_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def server(
    repo: Path, grpc_port: int, server_factory: Callable[..., RunningServer]
) -> RunningServer:
    return server_factory(
        repo / "config.json", "--port", str(grpc_port), "--grpc_bind_address", "127.0.0.1"
    )


def _no_server_path(repo: Path, text: str) -> None:
    for root in {str(repo), str(repo.resolve())}:
        assert root not in text, text


def _error_message(server: RunningServer, name: str) -> str:
    (status,) = server.get(f"/v1/models/{name}").json()["model_version_status"]
    message = status["status"]["error_message"]
    assert isinstance(message, str)
    return message


def test_tfs_status_of_a_failed_version_is_relative(server: RunningServer, repo: Path) -> None:
    assert _error_message(server, "no_file") == "Could not find file for model in 1"
    corrupt = _error_message(server, "corrupt")
    assert corrupt.startswith("Cannot load model 1/model.xml (+ model.bin): "), corrupt
    _no_server_path(repo, corrupt)


@pytest.mark.parametrize("name", ["missing", "empty"])
def test_a_model_without_versions_is_reported_without_its_path(
    server: RunningServer, repo: Path, name: str
) -> None:
    for path in (f"/v1/models/{name}", f"/v2/models/{name}", f"/v2/models/{name}/ready"):
        response = server.get(path)
        assert response.status_code >= 400, response.text
        _no_server_path(repo, response.text)
    response = server.post(f"/v1/models/{name}:predict", {"instances": [[1.0] * 4]})
    assert response.status_code >= 400
    _no_server_path(repo, response.text)


@pytest.mark.parametrize("name", ["no_file", "corrupt"])
def test_kserve_answers_for_a_failed_version_are_relative(
    server: RunningServer, repo: Path, name: str
) -> None:
    for path in (
        f"/v2/models/{name}/versions/1",
        f"/v2/models/{name}/versions/1/ready",
        f"/v2/models/{name}",
    ):
        _no_server_path(repo, server.get(path).text)
    response = server.post(
        f"/v2/models/{name}/versions/1/infer",
        {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]},
    )
    assert response.status_code >= 400
    assert "error: " in response.json()["error"]  # the load failure, relative
    _no_server_path(repo, response.text)


def test_config_status_lists_every_failure_without_paths(server: RunningServer, repo: Path) -> None:
    text = server.get("/v1/config").text
    for name in ("no_file", "corrupt"):
        assert f'"{name}"' in text
    _no_server_path(repo, text)
    server.log()  # flushes
    assert str(repo / "no_file" / "1") in server.log_path.read_text()


@pytest.mark.parametrize("name", ["no_file", "corrupt", "missing"])
def test_grpc_status_and_ready_are_relative(
    server: RunningServer, repo: Path, grpc_port: int, name: str
) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name = name
        try:
            reply = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(
                request, timeout=10
            )
            text = str(reply)
        except grpc.RpcError as exc:
            text = str(exc.details())
        _no_server_path(repo, text)
        kserve = grpc_predict_v2_pb2_grpc.GRPCInferenceServiceStub(channel)
        for call, message in (
            (kserve.ModelReady, kfs.ModelReadyRequest(name=name)),
            (kserve.ModelMetadata, kfs.ModelMetadataRequest(name=name)),
        ):
            try:
                text = str(call(message, timeout=10))
            except grpc.RpcError as exc:
                text = str(exc.details())
            _no_server_path(repo, text)
