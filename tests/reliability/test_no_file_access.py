"""Hostile model names and versions never reach the file system: with the models served (and
with lazy loading, where a name could tempt a loader), every REST route and gRPC codec answers
a clean 4xx while no file is opened, listed or stat'ed."""

from __future__ import annotations

import builtins
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from core.api import App, make_request
from core.config import Settings
from core.dataplane import DataPlane
from core.errors import ServingError
from core.serving.registry import ModelManager
from handlers import grpc_server
from protos.gen.kserve import grpc_predict_v2_pb2 as kfs
from protos.gen.tensorflow_serving.apis import get_model_status_pb2, predict_pb2
from tests.reliability.helpers import SCALER_X, build_repository

NAMES = [
    "..",
    "../scaler",
    "..%2Fscaler",
    "%2E%2E%2Fscaler",
    "/etc/passwd",
    "scaler/../../x",
    "sca\x00ler",
    "a" * 5000,
    "ß☃𝄞",
    "%00",
    "scaler%2F..%2F..",
    "C:\\Windows",
    "~root",
]
VERSIONS = ["..", "-1", "1/..", "9" * 40, "%2E%2E", "1\x00"]
_seen: list[str] = []
_recording = [False]


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _recording[0] and event in (
        "open",
        "os.listdir",
        "os.scandir",
        "os.chdir",
        "os.mkdir",
        "os.remove",
        "os.rename",
        "shutil.rmtree",
    ):
        _seen.append(f"{event} {args[0]!r}")


sys.addaudithook(_audit)  # a hook cannot be removed; it records only while _recording


@contextmanager
def recording(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every open/listdir/scandir (audit events) and every os.stat/lstat (no audit event)."""
    for name in ("stat", "lstat"):
        real: Callable[..., Any] = getattr(os, name)

        def spy(path: Any, *args: Any, _real: Callable[..., Any] = real, **kw: Any) -> Any:
            if _recording[0]:
                _seen.append(f"stat {path!r}")
            return _real(path, *args, **kw)

        monkeypatch.setattr(os, name, spy)
    _seen.clear()
    _recording[0] = True
    try:
        yield _seen
    finally:
        _recording[0] = False
        monkeypatch.undo()


@pytest.fixture(scope="module", params=[False, True], ids=["loaded", "lazy"])
def app(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> App:
    root = build_repository(tmp_path_factory.mktemp("nofs"))
    settings = Settings(
        config_path=str(root / "config.json"),
        lazy_load=request.param,
        cache_dir=str(root / "cache"),
    )
    app = App(ModelManager.start(settings), settings)
    warm(app)
    return app


def warm(app: App) -> None:
    """One good call of each kind, so lazy imports and the lazy model load are behind us."""
    _manager[:] = [app.manager]
    body = json.dumps({"instances": SCALER_X}).encode()
    assert app.handle(make_request("POST", "/v1/models/scaler:predict", body)).status == 200
    kserve = json.dumps(
        {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": SCALER_X[0]}]}
    ).encode()
    assert app.handle(make_request("POST", "/v2/models/scaler/infer", kserve)).status == 200
    for path in (
        "/v1/models/scaler",
        "/v1/models/scaler/metadata",
        "/v2/models/scaler",
        "/v2/models/scaler/ready",
        "/v1/models/nope",
        "/v2/models/nope/ready",
    ):
        app.handle(make_request("GET", path))
    for call in _grpc_calls("scaler", ""):
        _grpc(call)


def _rest_calls(name: str, version: str) -> list[tuple[str, str, bytes]]:
    body = json.dumps({"instances": SCALER_X}).encode()
    v = f"/versions/{version}" if version else ""
    return [
        ("POST", f"/v1/models/{name}{v}:predict", body),
        ("GET", f"/v1/models/{name}{v}", b""),
        ("GET", f"/v1/models/{name}{v}/metadata", b""),
        ("GET", f"/v2/models/{name}{v}", b""),
        ("GET", f"/v2/models/{name}{v}/ready", b""),
        ("POST", f"/v2/models/{name}{v}/infer", b'{"inputs": []}'),
        ("POST", f"/v1/models/{name}{v}:classify", body),
    ]


def _grpc_calls(name: str, version: str) -> list[Callable[[], object]]:
    tfs = predict_pb2.PredictRequest()
    tfs.model_spec.name = name
    if version.isdigit() and len(version) < 18:
        tfs.model_spec.version.value = int(version)
    status = get_model_status_pb2.GetModelStatusRequest()
    status.model_spec.name = name
    infer = kfs.ModelInferRequest(model_name=name, model_version=version)
    meta = kfs.ModelMetadataRequest(name=name, version=version)
    ready = kfs.ModelReadyRequest(name=name, version=version)
    plane = DataPlane(_manager[0], "gRPC", _manager[0].settings.limits)
    prediction, models = grpc_server.PredictionService(plane), grpc_server.ModelService(plane)
    inference = grpc_server.InferenceService(plane)
    # the servicer methods without their ServingError -> context.abort wrapper
    return [
        lambda: type(prediction).Predict.__wrapped__(prediction, tfs, None),
        lambda: type(models).GetModelStatus.__wrapped__(models, status, None),
        lambda: type(inference).ModelInfer.__wrapped__(inference, infer, None),
        lambda: type(inference).ModelMetadata.__wrapped__(inference, meta, None),
        lambda: type(inference).ModelReady.__wrapped__(inference, ready, None),
    ]


_manager: list[ModelManager] = []


def _grpc(call: Callable[[], object]) -> str:
    try:
        call()
    except ServingError as exc:
        return exc.grpc_code
    return "OK"


def test_hostile_names_touch_no_file(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    warm(app)
    answers: dict[int, int] = {}
    with recording(monkeypatch) as seen:
        for name in NAMES:
            for version in ("", *VERSIONS):
                for method, path, body in _rest_calls(name, version):
                    response = app.handle(make_request(method, path, body))
                    answers[response.status] = answers.get(response.status, 0) + 1
                    assert response.status in (400, 404, 405), (path, response.body)
                    if response.body:
                        assert set(json.loads(response.body)) == {"error"}
                for call in _grpc_calls(name, version):
                    assert _grpc(call) in ("NOT_FOUND", "INVALID_ARGUMENT", "OK"), (name, version)
    assert seen == [], seen[:20]
    assert answers.keys() <= {400, 404, 405} and answers.get(404, 0) > 0


def test_recorder_sees_file_access(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The spy itself works: a stat, an open and a listdir are all recorded."""
    target = tmp_path / "f"
    target.write_text("x")
    with recording(monkeypatch) as seen:
        target.stat()
        with builtins.open(target):
            pass
        os.listdir(tmp_path)
    kinds = {entry.split()[0] for entry in seen}
    assert {"stat", "open", "os.listdir"} <= kinds, seen
