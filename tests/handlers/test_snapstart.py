"""SnapStart hooks (handlers/snapstart.py) registered through the real snapshot-restore-py and
run by awslambdaric's own hook runner, around a simulated restore: same memory, a new clock,
storage connections that died with the snapshot, and (second test) another CPU."""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import openvino as ov
import orjson
import pytest
import snapshot_restore_py
from awslambdaric import lambda_runtime_hooks_runner

from core import metrics
from core.api import App, make_request
from core.config import Settings
from core.runtime import blobs
from core.serving.model import ModelVersion
from core.serving.registry import ModelManager, ServedModel
from demo.models import classifier, save, scaler
from handlers import snapstart
from tests.core.serving.stateful.conftest import accumulator
from tests.emulators import MotoS3

BUCKET = "snapstart-models"
CONFIG = {
    "model_config_list": [
        {"config": {"name": "classifier", "base_path": f"s3://{BUCKET}/classifier"}},
        {"config": {"name": "scaler", "base_path": f"s3://{BUCKET}/scaler"}},
        {
            "config": {
                "name": "accumulator",
                "base_path": f"s3://{BUCKET}/accumulator",
                "stateful": True,
            }
        },
    ]
}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("snapstart-models")
    save(classifier(seed=0, batch=None), root / "classifier" / "1")
    save(scaler(2.0), root / "scaler" / "1")
    save(accumulator(), root / "accumulator" / "1")
    return root


@pytest.fixture(scope="module")
def s3(models: Path) -> Iterator[MotoS3]:
    emulator = MotoS3()
    emulator.start()
    try:
        yield emulator
    finally:
        emulator.close()


def _fill(emulator: MotoS3, models: Path) -> None:
    """The bucket with every file under `models` (moto keeps its buckets in memory only)."""
    client = _client(emulator)
    client.create_bucket(Bucket=BUCKET)
    for path in sorted(p for p in models.rglob("*") if p.is_file()):
        client.put_object(
            Bucket=BUCKET, Key=path.relative_to(models).as_posix(), Body=path.read_bytes()
        )


def _client(emulator: MotoS3) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=emulator.endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


@pytest.fixture
def app(s3: MotoS3, models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> App:
    _fill(s3, models)
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("OVS_S3_CLIENT", raising=False)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG))
    settings = Settings.from_env(
        config_path=str(config),
        cache_dir=str(tmp_path / "cache"),
        reload_interval=0.5,
        concurrent=False,
    )
    return App(ModelManager.start(settings), settings)


@pytest.fixture
def hooks(app: App) -> Iterator[dict[str, Any]]:
    """The hooks registered (alone) through snapshot-restore-py; the handler's cold-start dict."""
    snapshot_restore_py.get_before_snapshot().clear()
    snapshot_restore_py.get_after_restore().clear()
    cold: dict[str, Any] = {}
    assert snapstart.register(cold, app=lambda: app)
    yield cold
    snapstart.wait_for_recompile(120)
    snapshot_restore_py.get_before_snapshot().clear()
    snapshot_restore_py.get_after_restore().clear()


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The thread of every model load from now on."""
    seen: list[str] = []
    original = ModelVersion.load

    def load(self: ModelVersion) -> None:
        seen.append(threading.current_thread().name)
        original(self)

    monkeypatch.setattr(ModelVersion, "load", load)
    return seen


@dataclass
class Snapshot:
    """The app as a snapshot holds it, after awslambdaric's runner ran the before-snapshot hooks."""

    served: ServedModel  # the classifier
    metrics_at_init: str  # /metrics before the hooks ran
    lines: list[dict[str, Any]]  # what the before-snapshot hook logged


@pytest.fixture
def snapshot(
    app: App,
    hooks: dict[str, Any],
    loads: list[str],
    capsys: pytest.CaptureFixture[str],
) -> Snapshot:
    metrics_at_init = metrics.exposition(app.manager)[0]
    lambda_runtime_hooks_runner.run_before_snapshot()  # awslambdaric's runner, as on Lambda
    lines = _hook_lines(capsys.readouterr().out)
    return Snapshot(app.manager.models["classifier"], metrics_at_init, lines)


def _restore(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    """Runs the after-restore hooks through awslambdaric's runner; what they logged."""
    lambda_runtime_hooks_runner.run_after_restore()
    return _hook_lines(capsys.readouterr().out)


def _hook_lines(text: str) -> list[dict[str, Any]]:
    return [
        json.loads(line)["ov_serverless_snapstart"]
        for line in text.splitlines()
        if line.startswith('{"ov_serverless_snapstart"')
    ]


def _predict(
    app: App, name: str, body: dict[str, Any], version: int | None = None
) -> dict[str, Any]:
    where = f"/versions/{version}" if version else ""
    response = app.handle(
        make_request("POST", f"/v1/models/{name}{where}:predict", orjson.dumps(body), {})
    )
    assert response.status == 200, response.body[:300]
    return dict(orjson.loads(response.body))


def _sequence_start(app: App) -> int:
    out = _predict(
        app, "accumulator", {"inputs": {"x": [[1, 1, 1, 1]], "sequence_control_input": [1]}}
    )
    return int(np.ravel(out["outputs"]["sequence_id"])[0])


def _expected(tensor: np.ndarray) -> np.ndarray:
    compiled = ov.Core().compile_model(classifier(seed=0, batch=None), "CPU")
    return np.asarray(compiled({0: tensor})[0])


def test_restored_copy_answers_without_loading_and_renews_its_state(
    app: App,
    hooks: dict[str, Any],
    snapshot: Snapshot,
    s3: MotoS3,
    models: Path,
    loads: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert metrics.exposition(app.manager)[0] == snapshot.metrics_at_init  # warm-up not counted
    before = snapshot.lines
    assert [line["hook"] for line in before] == ["before_snapshot"]
    assert before[0]["warm_inferences"] == 2  # classifier and scaler; stateful skipped
    served = snapshot.served
    old_version, old_backend = served.versions[1], served.repository.backend
    snapshot_random, snapshot_numpy = random.getstate(), np.random.get_state()

    # what a restore changes: the monotonic clock's readings, the connections (the server
    # they reached is gone), and the bucket moved on while the snapshot was cached
    app.manager._last_check = time.monotonic() + 3600
    s3.kill()
    s3.start()
    _fill(s3, models)
    _put_version(s3, tmp_path / "classifier-2")

    after = _restore(capsys)
    assert [line["hook"] for line in after] == ["after_restore"]
    assert after[0]["cpu_changed"] == []
    assert after[0]["duration_s"] < 10  # Lambda's limit for the runtime and these hooks
    assert hooks["restored"] is True

    # the first request: the snapshot's compiled model, nothing loaded or compiled
    tensor = np.random.default_rng(3).random((1, 3, 224, 224), dtype=np.float32)
    out = _predict(app, "classifier", {"instances": tensor.tolist()}, version=1)
    np.testing.assert_allclose(out["predictions"], _expected(tensor), rtol=1e-5, atol=1e-6)
    assert loads == [] and served.versions[1] is old_version

    # random state: a sibling restored from the same snapshot would draw other numbers
    sibling = random.Random()
    sibling.setstate(snapshot_random)
    assert random.random() != sibling.random()
    sibling_np = np.random.RandomState()
    sibling_np.set_state(snapshot_numpy)
    assert np.random.random() != sibling_np.random_sample()
    # sequence ids: the snapshot's counter would hand out 1; a restored copy starts elsewhere
    first = _sequence_start(app)
    assert first != 1
    lambda_runtime_hooks_runner.run_after_restore()  # another copy of the same snapshot
    assert _sequence_start(app) not in (1, first)

    # storage: a new client, which reaches the restarted server and loads version 2 once the
    # reload interval (restarted at the restore, not an hour away) has passed
    assert served.repository.backend is not old_backend
    time.sleep(0.6)
    app.manager.reload_if_due()
    assert served.versions[2].available
    assert loads == ["MainThread"]


def _put_version(s3: MotoS3, folder: Path) -> None:
    save(classifier(seed=1, batch=None), folder)
    for path in sorted(folder.iterdir()):
        _client(s3).put_object(
            Bucket=BUCKET, Key=f"classifier/2/{path.name}", Body=path.read_bytes()
        )


def test_restore_on_another_cpu_recompiles_in_the_background(
    app: App,
    snapshot: Snapshot,
    loads: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    served = snapshot.served
    old_version = served.default_version()
    flags = blobs.cpu_flags()  # this CPU, and one more feature (a newer CPU)
    monkeypatch.setattr(blobs, "cpu_flags", lambda: flags + " amx_fp8_restored")
    counted_load = ModelVersion.load

    def slow_load(self: ModelVersion) -> None:  # a compile long enough to overlap a request
        time.sleep(2)
        counted_load(self)

    monkeypatch.setattr(ModelVersion, "load", slow_load)
    tensor = np.random.default_rng(4).random((1, 3, 224, 224), dtype=np.float32)
    expected = np.asarray(ov.Core().compile_model(old_version.model_file, "CPU")({0: tensor})[0])

    after = _restore(capsys)
    assert after[-1]["cpu_changed"] == ["CPU"] and after[-1]["cpu_missing"] == []
    app.manager._last_check = float("-inf")  # a repository check is due on this request
    out = _predict(app, "classifier", {"instances": tensor.tolist()})
    assert not snapstart.wait_for_recompile(0)  # answered while the recompile still runs
    np.testing.assert_allclose(out["predictions"], expected, rtol=1e-5, atol=1e-6)
    assert snapstart.wait_for_recompile(120)
    assert set(loads) == {"snapstart-recompile"}  # never on the request's thread
    fresh = served.versions[old_version.version]
    assert fresh is not old_version and fresh.available
    assert fresh.blob_key != old_version.blob_key  # compiled for this CPU's key
    out = _predict(app, "classifier", {"instances": tensor.tolist()})
    np.testing.assert_allclose(out["predictions"], expected, rtol=1e-5, atol=1e-6)
    assert any(line["hook"] == "recompile" for line in _hook_lines(capsys.readouterr().out))


def test_restore_on_a_cpu_lacking_a_feature_recompiles_before_any_request(
    app: App,
    snapshot: Snapshot,
    loads: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The snapshot's compile may use instructions this CPU lacks: it must not serve."""
    served = snapshot.served
    old_version = served.default_version()
    flags = sorted(blobs.cpu_flags().split())
    if len(flags) < 2:
        pytest.skip("this CPU reports fewer than two of the ISA flags the blob key holds")
    monkeypatch.setattr(blobs, "cpu_flags", lambda: flags[0])  # an older CPU

    after = _restore(capsys)
    restored = next(line for line in after if line["hook"] == "after_restore")
    assert restored["cpu_changed"] == ["CPU"] and restored["cpu_missing"] == flags[1:]
    assert set(loads) == {"MainThread"}  # inside the hook: done before the first request
    fresh = served.versions[old_version.version]
    assert fresh is not old_version and fresh.available
    tensor = np.random.default_rng(5).random((1, 3, 224, 224), dtype=np.float32)
    expected = np.asarray(ov.Core().compile_model(old_version.model_file, "CPU")({0: tensor})[0])
    out = _predict(app, "classifier", {"instances": tensor.tolist()})
    np.testing.assert_allclose(out["predictions"], expected, rtol=1e-5, atol=1e-6)


def test_without_snapshot_restore_py_nothing_is_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "snapshot_restore_py", None)
    assert snapstart.register({}) is False


def test_the_hooks_use_only_public_functions_of_the_core() -> None:
    """What a snapshot copies is renewed through the core modules' public functions, so a
    change inside one of them cannot silently break a restore: the hooks read or write no
    private name (`x._name`) of another object."""
    import ast

    tree = ast.parse(Path(snapstart.__file__).read_text())
    private = sorted(
        f"line {node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
    )
    assert private == []
