"""`ov-serverless package lambda-zip`: the real build (wheels from PyPI, cached under pip's cache
folder), its size and determinism, then the unzipped package served by the real awslambdaric
bootstrap (with SnapStart's hooks) against a local Runtime API, from a CPython of the package's
version and nothing else on its path."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from demo.models import write_demo_repository
from handlers import package
from handlers.package import LAMBDA_UNZIPPED_LIMIT, Options, PackageError, Target
from tests.handlers.aws_lambda.test_lambda_runtime import PREFIX, RuntimeApi, _Handler
from tests.handlers.conftest import Call, load_event, outputs, reply_body, reply_headers

FORBIDDEN = (
    "libopenvino_intel_gpu_plugin",
    "libopenvino_intel_npu_plugin",
    "libopenvino_onnx_frontend",
    "/tests/",
    "/include/",
    ".cpython-311.pyc",
)


PYTHON312 = package.find_python("3.12")


@pytest.fixture(scope="module")
def demo_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_demo_repository(tmp_path_factory.mktemp("demo-repository"))


@pytest.fixture(scope="module")
def built(
    demo_config: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, package.Report]:
    out = tmp_path_factory.mktemp("zip") / "function.zip"
    return out, package.build(out, Options(Target("x86_64", "3.12"), config_path=demo_config))


def test_zip_for_python312_fits_with_room_and_holds_what_lambda_runs(
    built: tuple[Path, package.Report],
) -> None:
    out, report = built
    assert report.unzipped_bytes < 0.8 * LAMBDA_UNZIPPED_LIMIT  # room for bigger models
    assert report.zipped_bytes == out.stat().st_size < report.unzipped_bytes
    with zipfile.ZipFile(out) as archive:
        infos = archive.infolist()
    names = [info.filename for info in infos]
    assert names == sorted(names)
    assert sum(info.file_size for info in infos) == report.unzipped_bytes
    assert {info.date_time for info in infos} == {package.ZIP_TIME}
    assert {info.external_attr >> 16 & 0o777 for info in infos} <= {0o644, 0o755}
    assert not [n for n in names if any(bad in "/" + n for bad in FORBIDDEN)]
    assert any(n.startswith("openvino/_pyopenvino.cpython-312-x86_64") for n in names)
    assert any(n.startswith("openvino/libs/libopenvino_ir_frontend.so") for n in names)
    assert "handlers/aws_lambda/__init__.py" in names and "handlers/snapstart.py" in names
    assert "handlers/aws_lambda/sources.py" in names
    assert "model_repository/config.json" in names
    if PYTHON312:  # byte-compiled for 3.12 with paths under /var/task, no timestamps
        pyc = "handlers/aws_lambda/__pycache__/__init__.cpython-312.pyc"
        assert pyc in names and report.bytecode == "CPython 3.12"
        with zipfile.ZipFile(out) as archive:
            data = archive.read(pyc)
        assert int.from_bytes(data[4:8], "little") == 0b01  # hash-based, unchecked
        assert b"/var/task/handlers/aws_lambda/__init__.py" in data
    else:
        assert not [n for n in names if n.endswith(".pyc")] and report.bytecode == ""
    assert not any(n.startswith(("awslambdaric/", "snapshot_restore_py")) for n in names)
    pruned = dict(report.pruned)
    assert pruned["openvino/libs/libopenvino_intel_gpu_plugin.so"] > 20 << 20
    assert report.frontends == ("ir",)
    assert report.environment == {"OVS_CONFIG_PATH": "/var/task/model_repository/config.json"}
    text = "\n".join(report.lines())
    assert "unzipped" in text and "zipped" in text and "libopenvino_intel_gpu_plugin" in text


def test_building_twice_gives_the_same_bytes(
    built: tuple[Path, package.Report], demo_config: Path, tmp_path: Path
) -> None:
    first, _ = built
    again = tmp_path / "again.zip"
    package.build(again, Options(Target("x86_64", "3.12"), config_path=demo_config))
    assert again.read_bytes() == first.read_bytes()


def test_arm64_stops_with_the_glibc_it_needs(tmp_path: Path) -> None:
    """The current openvino aarch64 wheel needs glibc 2.35; AL2023 has 2.34 (if a release ever
    loads there again, the build goes on and this test says so)."""
    out = tmp_path / "arm.zip"
    with pytest.raises(PackageError) as caught:
        package.build(out, Options(Target("arm64", "3.12")))
    message = str(caught.value)
    assert "glibc 2.34" in message and "--allow_older_openvino" in message
    assert "needs glibc 2." in message and not out.exists()


@pytest.mark.parametrize(
    ("config", "args", "message"),
    [
        (
            {"model_config_list": [{"config": {"name": "m", "base_path": "/srv/models/m"}}]},
            [],
            "model base_path '/srv/models/m' is outside the config's folder",
        ),
        (
            {"model_config_list": [{"config": {"name": "m", "base_path": "../m"}}]},
            [],
            "model base_path '../m' is outside the config's folder",
        ),
        ({"model_config_list": []}, ["--extras", "nosuch"], "unknown extra 'nosuch'"),
        ({"model_config_list": []}, ["--frontends", "onnx,caffe"], "unknown frontend caffe"),
    ],
)
def test_command_line_mistakes_fail_before_any_download(
    tmp_path: Path, config: dict[str, Any], args: list[str], message: str
) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "config.json").write_text(json.dumps(config))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "handlers.cli",
            "package",
            "lambda-zip",
            str(tmp_path / "out.zip"),
            "--config_path",
            str(tmp_path / "repo" / "config.json"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PIP_INDEX_URL": "http://127.0.0.1:9/"},
    )  # no index reachable
    assert done.returncode == 1, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out.zip").exists()


def test_installed_distribution_declares_the_same_requirements(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from_checkout = package.project_requirements(["aws", "gcp"])
    monkeypatch.setattr(package, "project_root", lambda: tmp_path)  # no pyproject.toml there
    assert package.project_requirements(["aws", "gcp"]) == from_checkout
    assert "awslambdaric" not in " ".join(from_checkout) and "boto3>=1.34" in from_checkout


def test_over_the_limit_is_refused_with_the_biggest_items(tmp_path: Path) -> None:
    staging = tmp_path / "task"
    (staging / "models" / "big").mkdir(parents=True)
    with (staging / "models" / "big" / "weights.bin").open("wb") as sparse:
        sparse.truncate(LAMBDA_UNZIPPED_LIMIT)  # sparse: no disk used
    (staging / "handler.py").write_text("x = 1\n")
    with pytest.raises(PackageError) as caught:
        package.check_size(staging)
    message = str(caught.value)
    assert "over Lambda's limit of 262,144,000 bytes" in message
    assert "models/big/weights.bin  250.0 MiB" in message


def test_prune_keeps_the_frontends_the_models_need(tmp_path: Path) -> None:
    staging = tmp_path / "task"
    libs = staging / "openvino" / "libs"
    libs.mkdir(parents=True)
    for name in (
        "libopenvino_ir_frontend.so.2641",
        "libopenvino_onnx_frontend.so.2641",
        "libopenvino_paddle_frontend.so.2641",
        "libopenvino_intel_cpu_plugin.so",
        "libopenvino_intel_gpu_plugin.so",
        "cache.json",
    ):
        (libs / name).write_bytes(b"x" * 10)
    (staging / "openvino" / "frontend" / "onnx").mkdir(parents=True)
    (staging / "openvino" / "frontend" / "onnx" / "__init__.py").write_text("")
    (staging / "model_repository" / "m" / "1").mkdir(parents=True)
    (staging / "model_repository" / "m" / "1" / "model.onnx").write_bytes(b"onnx")
    (staging / "model_repository" / "m" / "tests").mkdir()  # a model's files stay
    frontends = package.frontends_needed(Options(model_path=tmp_path), staging)
    assert frontends == ("ir", "onnx")
    removed = {path for path, _ in package.prune(staging, frontends)}
    assert removed == {
        "openvino/libs/libopenvino_paddle_frontend.so.2641",
        "openvino/libs/libopenvino_intel_gpu_plugin.so",
        "openvino/libs/cache.json",
    }


# -- the unzipped package under the real bootstrap ----------------------------------------------


class _SnapStartHandler(_Handler):
    """The Runtime API, plus the restore endpoint SnapStart's init calls before resuming."""

    def do_GET(self) -> None:  # noqa: N802
        if self.path == PREFIX + "/restore/next":
            self.server.results.put(("restore", "next", None))
            return self._reply(200, b"{}")
        super().do_GET()


class SnapStartRuntimeApi(RuntimeApi):
    def __init__(self) -> None:
        super().__init__()
        self.RequestHandlerClass = _SnapStartHandler


@pytest.fixture(scope="module")
def runnable(
    built: tuple[Path, package.Report], demo_config: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path, str]:
    """(task folder, runtime folder, python): the zip unzipped into a fresh folder, and the
    managed runtime's part (awslambdaric and its dependencies) installed for the same CPython.
    Without a CPython 3.12 here, the same build runs for this interpreter's version."""
    zipped, _ = built
    python = PYTHON312
    target = Target("x86_64", "3.12")
    if python is None:
        target = Target("x86_64", f"{sys.version_info.major}.{sys.version_info.minor}")
        python = str(Path(sys.base_prefix, "bin", f"python{target.python}"))
        zipped = tmp_path_factory.mktemp("zip-here") / "function.zip"
        package.build(zipped, Options(target, config_path=demo_config))
    task = tmp_path_factory.mktemp("task")
    with zipfile.ZipFile(zipped) as archive:
        archive.extractall(task)
    runtime = tmp_path_factory.mktemp("runtime")
    from importlib.metadata import version

    resolved = package.resolve([f"awslambdaric=={version('awslambdaric')}"], target)
    wheels = package.download(resolved, target, package.default_wheel_cache(target))
    package.install(wheels, target, runtime)
    return task, runtime, python


@pytest.fixture
def runtime_api() -> Iterator[SnapStartRuntimeApi]:
    api = SnapStartRuntimeApi()
    threading.Thread(target=api.serve_forever, daemon=True).start()
    yield api
    api.shutdown()
    api.server_close()


def test_unzipped_package_serves_under_the_real_bootstrap_with_snapstart(
    runnable: tuple[Path, Path, str],
    runtime_api: SnapStartRuntimeApi,
    contract_calls: list[Call],
    tmp_path: Path,
) -> None:
    task, runtime, python = runnable
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "PYTHONPATH": f"{task}:{runtime}",  # /var/task first, then /var/runtime
        "LAMBDA_TASK_ROOT": str(task),
        "AWS_LAMBDA_INITIALIZATION_TYPE": "snap-start",
        "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{runtime_api.server_address[1]}",
        "AWS_LAMBDA_FUNCTION_NAME": "ovs",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "3008",
        "AWS_LAMBDA_FUNCTION_VERSION": "1",
        "_HANDLER": "handlers.aws_lambda.handler",
        "OVS_CONFIG_PATH": str(task / "model_repository" / "config.json"),
        "OVS_CACHE_DIR": str(tmp_path / "cache"),
    }
    calls = [c for c in contract_calls if c.name in ("tfs-row", "kserve-binary", "tfs-jpeg")]
    for call in calls:
        runtime_api.events.put(
            (
                call.name,
                load_event(
                    "sam-cli-rendered/HttpApi",
                    call.path,
                    call.body,
                    base64=True,
                    method=call.method,
                    headers=call.headers,
                ),
            )
        )
    log = tmp_path / "runtime.log"
    with log.open("wb") as out:  # -s: no user site; -S would also drop the stdlib's site
        proc = subprocess.Popen(
            [python, "-s", "-m", "awslambdaric", "handlers.aws_lambda.handler"],
            cwd=task,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        results = _collect(runtime_api, len(calls) + 1, log.read_text)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert results.pop("restore") == ("next", None)
    for call in calls:
        kind, reply = results[call.name]
        assert kind == "response", (reply, log.read_text()[-3000:])
        got = outputs(call, reply["statusCode"], reply_headers(reply), reply_body(reply))
        assert call.expected is not None
        np.testing.assert_allclose(got, call.expected, rtol=1e-5, atol=1e-6)
    text = log.read_text()
    assert '"hook":"before_snapshot"' in text and '"hook":"after_restore"' in text
    assert '"restored":true' in text  # the cold-start line of the first request
    assert f"{task}/openvino" in _imported(python, task, runtime)


def _collect(api: RuntimeApi, count: int, log: Callable[[], str]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for _ in range(count):
        try:
            request_id, kind, payload = api.results.get(timeout=120)
        except queue.Empty:
            raise AssertionError(f"no result from the runtime:\n{log()[-3000:]}") from None
        results[request_id] = (kind, payload)
    return results


def _imported(python: str, task: Path, runtime: Path) -> str:
    """Where that interpreter, with the function's path, imports openvino from."""
    done = subprocess.run(
        [python, "-s", "-c", "import openvino; print(openvino.__file__)"],
        cwd=task,
        env={"PYTHONPATH": f"{task}:{runtime}"},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout
