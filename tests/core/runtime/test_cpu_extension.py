"""OVMS's --cpu_extension (OVS_CPU_EXTENSION): a library of custom operations, loaded before
the models, so that an IR using them is served. The library is a real OpenVINO extension
(custom_op/add_one.cpp: AddOne, y = x + 1), built here with g++ against the openvino wheel."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest

from core.api import default_app, make_request
from tests.core.helpers import console_script

SOURCE = Path(__file__).parent / "custom_op" / "add_one.cpp"
PREDICT = "/v1/models/custom:predict"
BODY = json.dumps({"instances": [[1.0, 2.0, 3.0, -4.0]]})


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wheel = Path(ov.__file__).parent
    (core_library,) = (wheel / "libs").glob("libopenvino.so.*")
    out = tmp_path_factory.mktemp("extension") / "libadd_one.so"
    subprocess.run(
        [
            "g++",
            "-std=c++17",
            "-O1",
            "-shared",
            "-fPIC",
            f"-I{wheel / 'include'}",
            str(SOURCE),
            "-o",
            str(out),
            str(core_library),
            f"-Wl,-rpath,{core_library.parent}",
        ],
        check=True,
        timeout=300,
    )
    return out


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """custom/1/model.xml: x[1,4] -> AddOne -> y. The opset API cannot make an op it does not
    know, so a ReLU is saved and renamed in the IR to the extension's op type."""
    root = tmp_path_factory.mktemp("custom")
    x = ops.parameter([1, 4], np.float32, name="x")
    xml = root / "1" / "model.xml"
    ov.save_model(ov.Model([ops.result(ops.relu(x))], [x], "custom"), xml)
    text = xml.read_text()
    assert text.count('type="ReLU" version="opset1"') == 1
    xml.write_text(
        text.replace('type="ReLU" version="opset1"', 'type="AddOne" version="extension"')
    )
    return root


def _invoke(model_path: Path, tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """`ov-serverless invoke` in a fresh process: an extension stays in the process's Core."""
    return subprocess.run(
        [
            console_script(),
            "invoke",
            "POST",
            PREDICT,
            "--data",
            BODY,
            "--model_name",
            "custom",
            "--model_path",
            str(model_path),
            "--cache_dir",
            str(tmp_path),
            "--log_level",
            "ERROR",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_model_with_a_custom_op_is_served_with_its_extension(
    library: Path, model_path: Path, tmp_path: Path
) -> None:
    done = _invoke(model_path, tmp_path, "--cpu_extension", str(library))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"predictions": [[2.0, 3.0, 4.0, -3.0]]}
    done = _invoke(model_path, tmp_path)  # without it the IR names an unknown op
    assert done.returncode == 1
    assert json.loads(done.stdout) == {
        "error": "Model with requested version is not loaded yet - name: custom"
    }
    assert "Cannot create AddOne layer" in done.stderr  # the load error, logged


def test_a_missing_or_broken_library_is_a_usage_error(model_path: Path, tmp_path: Path) -> None:
    done = _invoke(model_path, tmp_path, "--cpu_extension", str(tmp_path / "nothing.so"))
    assert done.returncode == 64
    assert done.stderr.strip() == (
        "ov-serverless: File path provided as an --cpu_extension parameter does not exist in "
        f"the filesystem: {tmp_path / 'nothing.so'}"
    )
    (tmp_path / "junk.so").write_text("not a library")
    done = _invoke(model_path, tmp_path, "--cpu_extension", str(tmp_path / "junk.so"))
    assert done.returncode == 64
    assert "Custom CPU extension loading has failed! Reason:" in done.stderr


def test_serverless_hosts_take_it_from_the_environment(
    library: Path, model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import core.api

    for key, value in {
        "OVS_MODEL_NAME": "custom",
        "OVS_MODEL_PATH": str(model_path),
        "OVS_CACHE_DIR": str(tmp_path),
        "OVS_CPU_EXTENSION": str(library),
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("OVS_CONFIG_PATH", raising=False)
    monkeypatch.setattr(core.api, "_default_app", None)
    reply = default_app().handle(make_request("POST", PREDICT, BODY.encode()))
    assert (reply.status, json.loads(reply.body)) == (200, {"predictions": [[2, 3, 4, -3]]})
    assert sys.modules["core.runtime.ov_core"]._extensions == {str(library)}
