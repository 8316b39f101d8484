"""Version discovery and policy (OVMS test_model_version_policy / test_model_versions_handling):
versions 1..3 of a scaler whose factor equals its version, so every answer proves which version
computed it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from demo import models
from tests.core.helpers import RunningServer, error_of, save_ir, write_config

X = [1.0, 2.0, 3.0, 4.0]
NOT_FOUND = "Model with requested version is not found"


def answer(factor: float) -> list[float]:
    return [factor * v for v in X]


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, server_factory: Callable[..., RunningServer]
) -> RunningServer:
    root = tmp_path_factory.mktemp("versions")
    for version in (1, 2, 3):
        save_ir(models.scaler(float(version)), root / "scaler" / str(version))
    # Not versions: a non-numeric folder (with a loadable model in it) and version 0.
    save_ir(models.scaler(99.0), root / "scaler" / "latest")
    save_ir(models.scaler(98.0), root / "scaler" / "0")
    (root / "scaler" / "notes.txt").write_text("not a version")
    # "broken": versions 1 and 2 load; 3 exists but holds no model file.
    save_ir(models.scaler(1.0), root / "broken" / "1")
    save_ir(models.scaler(2.0), root / "broken" / "2")
    (root / "broken" / "3").mkdir(parents=True)
    (root / "broken" / "3" / "README.md").write_text("the model file is missing")
    config = write_config(
        root / "config.json",
        [
            {"name": "all", "base_path": "scaler", "model_version_policy": {"all": {}}},
            {
                "name": "latest2",
                "base_path": "scaler",
                "model_version_policy": {"latest": {"num_versions": 2}},
            },
            {
                "name": "specific",
                "base_path": str(root / "scaler"),
                "model_version_policy": {"specific": {"versions": [1, 3]}},
            },
            {"name": "default", "base_path": "scaler"},
            {"name": "broken", "base_path": "broken", "model_version_policy": {"all": {}}},
        ],
    )
    return server_factory(config)


SERVED = {"all": [1, 2, 3], "latest2": [2, 3], "specific": [1, 3], "default": [3]}


def predict(server: RunningServer, name: str, version: int | None) -> tuple[int, object]:
    path = f"/v1/models/{name}" + ("" if version is None else f"/versions/{version}")
    response = server.post(path + ":predict", {"instances": [X]})
    return response.status_code, response.json()


@pytest.mark.parametrize("name", sorted(SERVED))
def test_each_served_version_answers_with_its_own_numbers(server: RunningServer, name: str) -> None:
    for version in SERVED[name]:
        assert predict(server, name, version) == (200, {"predictions": [answer(version)]})


@pytest.mark.parametrize("name", sorted(SERVED))
def test_versions_outside_the_policy_are_not_found(server: RunningServer, name: str) -> None:
    for version in {1, 2, 3, 4} - set(SERVED[name]):
        path = f"/v1/models/{name}/versions/{version}"
        for response in (
            server.post(path + ":predict", {"instances": [X]}),
            server.get(path + "/metadata"),
            server.get(path),
            server.get(f"/v2/models/{name}/versions/{version}"),
        ):
            assert response.status_code == 404, (path, response.text)
            assert error_of(response).startswith(NOT_FOUND)
        assert server.get(f"/v2/models/{name}/versions/{version}/ready").status_code == 404


@pytest.mark.parametrize("name", sorted(SERVED))
def test_default_version_is_the_highest_served(server: RunningServer, name: str) -> None:
    highest = max(SERVED[name])
    expected = (200, {"predictions": [answer(highest)]})
    assert predict(server, name, None) == expected
    assert predict(server, name, 0) == expected
    metadata = server.get(f"/v1/models/{name}/metadata").json()
    assert metadata["modelSpec"]["version"] == str(highest)
    assert server.get(f"/v1/models/{name}/versions/0/metadata").json() == metadata
    infer = server.post(
        f"/v2/models/{name}/infer",
        {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": X}]},
    ).json()
    assert infer["model_version"] == str(highest)
    assert infer["outputs"][0]["data"] == answer(highest)


@pytest.mark.parametrize("name", sorted(SERVED))
def test_status_lists_exactly_the_served_versions(server: RunningServer, name: str) -> None:
    for path in (f"/v1/models/{name}", f"/v1/models/{name}/versions/0"):
        doc = server.get(path).json()
        assert doc == {
            "model_version_status": [
                {
                    "version": str(v),
                    "state": "AVAILABLE",
                    "status": {"error_code": "OK", "error_message": "OK"},
                }
                for v in SERVED[name]
            ]
        }
    assert server.get(f"/v2/models/{name}").json()["versions"] == [str(v) for v in SERVED[name]]


def test_non_numeric_and_zero_folders_are_ignored(server: RunningServer) -> None:
    statuses = server.get("/v1/models/all").json()["model_version_status"]
    assert [s["version"] for s in statuses] == ["1", "2", "3"]
    # /versions/0 means "the default version", never the folder named 0 (factor 98).
    assert predict(server, "all", 0) == (200, {"predictions": [answer(3)]})


def test_version_without_model_file_is_reported_not_fatal(server: RunningServer) -> None:
    statuses = server.get("/v1/models/broken").json()["model_version_status"]
    assert [s["version"] for s in statuses] == ["1", "2", "3"]
    assert [s["state"] for s in statuses] == ["AVAILABLE", "AVAILABLE", "LOADING"]
    assert statuses[2]["status"]["error_code"] == "UNKNOWN"
    assert "Could not find file for model" in statuses[2]["status"]["error_message"]
    # The loadable versions serve; the default is the highest *available* one.
    assert predict(server, "broken", 1) == (200, {"predictions": [answer(1)]})
    assert predict(server, "broken", None) == (200, {"predictions": [answer(2)]})
    status, body = predict(server, "broken", 3)
    assert status == 404
    assert isinstance(body, dict) and "not loaded yet" in body["error"]
    assert server.get("/v2/models/broken/versions/3/ready").status_code == 404
    assert server.get("/v2/models/broken").json()["versions"] == ["1", "2"]
    # ...and every other model in the same config is unaffected.
    assert server.get("/v2/health/ready").status_code == 200
    assert predict(server, "default", None) == (200, {"predictions": [answer(3)]})
