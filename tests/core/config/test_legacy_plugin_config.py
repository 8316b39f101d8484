"""The OpenVINO 1.0 plugin_config keys of OVMS's tuning guide (the seed's slide 28), renamed as OVMS
renames them before compiling, in config.json, OVS_PLUGIN_CONFIG and --plugin_config.

Each line loads AVAILABLE and the compiled model reports the renamed property with the value
OpenVINO gives for the modern key itself (the machine decides how many streams 24 becomes)."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openvino as ov
import pytest
import requests

from core.config import Settings, notices, parse_config
from core.errors import ConfigError
from core.serving.registry import ModelManager
from core.serving.servable import State
from demo import models
from tests.core.helpers import console_script, free_port, save_ir, write_config

# slide 28, as written; "..." of CPU_THREADS_NUM filled with one thread
SLIDE_28 = [
    ('{"CPU_THROUGHPUT_STREAMS": "CPU_THROUGHPUT_AUTO"}', {"PERFORMANCE_HINT": "THROUGHPUT"}),
    ('{"CPU_THROUGHPUT_STREAMS": "24"}', {"NUM_STREAMS": "24"}),
    ('{"CPU_THREADS_NUM": "1"}', {"INFERENCE_NUM_THREADS": "1"}),
    ('{"CPU_BIND_THREAD": "NUMA"}', {"ENABLE_CPU_PINNING": False}),
    (
        '{"CPU_THROUGHPUT_STREAMS": "32", "CPU_BIND_THREAD": "NUMA"}',
        {"NUM_STREAMS": "32", "ENABLE_CPU_PINNING": False},
    ),
]
FULL_LINE = [
    "--grpc_workers",
    "8",
    "--nireq",
    "32",
    "--plugin_config",
    '{"CPU_THROUGHPUT_STREAMS": "32", "CPU_BIND_THREAD": "NUMA"}',
]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("legacy") / "scaler"
    save_ir(models.scaler(2.0, shape=(1, 4)), root / "1")
    return root


@pytest.fixture(autouse=True)
def fresh_notices() -> Iterator[None]:
    noticed = notices._noticed
    noticed.clear()
    yield
    noticed.clear()


def expected(modern: dict[str, Any]) -> dict[str, Any]:
    """What OpenVINO reports when it compiles the scaler with the modern keys itself."""
    compiled = ov.Core().compile_model(
        models.scaler(2.0, shape=(1, 4)), "CPU", {k: str(v) for k, v in modern.items()}
    )
    return {key: compiled.get_property(key) for key in modern}


def compiled_properties(manager: ModelManager, keys: list[str]) -> dict[str, Any]:
    version = manager.get("scaler")
    assert version.status.state is State.AVAILABLE, version.status
    return {key: version._compiled.get_property(key) for key in keys}


@pytest.mark.parametrize(("legacy", "modern"), SLIDE_28)
def test_config_json_renames_the_legacy_keys(legacy: str, modern: dict[str, Any]) -> None:
    doc = {
        "model_config_list": [
            {"config": {"name": "m", "base_path": "/models/m", "plugin_config": json.loads(legacy)}}
        ]
    }
    assert dict(parse_config(json.dumps(doc).encode()).models[0].plugin_config) == modern


@pytest.mark.parametrize(("legacy", "modern"), SLIDE_28)
def test_config_json_line_loads_and_compiles_the_modern_property(
    legacy: str,
    modern: dict[str, Any],
    repo: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = write_config(
        tmp_path / "config.json",
        [{"name": "scaler", "base_path": str(repo), "plugin_config": json.loads(legacy)}],
    )
    with caplog.at_level(logging.WARNING, logger="ov_serverless.config"):
        manager = ModelManager.start(
            Settings(config_path=str(config), cache_dir=str(tmp_path / "cache"))
        )
    assert compiled_properties(manager, list(modern)) == expected(modern)
    for key, new_key in zip(json.loads(legacy), modern, strict=True):
        assert f"{key} plugin config key is deprecated. Use {new_key} instead" in caplog.text


@pytest.mark.parametrize(("legacy", "modern"), SLIDE_28)
def test_env_line_loads_and_compiles_the_modern_property(
    legacy: str, modern: dict[str, Any], repo: Path, tmp_path: Path
) -> None:
    settings = Settings.from_env(
        {"OVS_MODEL_NAME": "scaler", "OVS_MODEL_PATH": str(repo), "OVS_PLUGIN_CONFIG": legacy},
        cache_dir=str(tmp_path),
    )
    manager = ModelManager.start(settings)
    assert compiled_properties(manager, list(modern)) == expected(modern)


def test_throughput_auto_differs_from_the_host_default(repo: Path, tmp_path: Path) -> None:
    """One request per instance compiles for LATENCY; the legacy key asks for THROUGHPUT."""
    plain = ModelManager.start(
        Settings(model_name="scaler", model_path=str(repo), cache_dir=str(tmp_path / "a"))
    )
    legacy = ModelManager.start(
        Settings(
            model_name="scaler",
            model_path=str(repo),
            cache_dir=str(tmp_path / "b"),
            model_options={"plugin_config": SLIDE_28[0][0]},
        )
    )
    assert compiled_properties(plain, ["PERFORMANCE_HINT"]) == {"PERFORMANCE_HINT": "LATENCY"}
    assert compiled_properties(legacy, ["PERFORMANCE_HINT"]) == {"PERFORMANCE_HINT": "THROUGHPUT"}


def test_notice_is_logged_once_per_model_and_key(caplog: pytest.LogCaptureFixture) -> None:
    doc = {
        "model_config_list": [
            {
                "config": {
                    "name": "m",
                    "base_path": "/models/m",
                    "plugin_config": {"CPU_THREADS_NUM": "2"},
                }
            }
        ]
    }
    with caplog.at_level(logging.WARNING, logger="ov_serverless.config"):
        for _ in range(3):  # a config reload parses the file again
            parse_config(json.dumps(doc).encode())
    assert caplog.text.count("CPU_THREADS_NUM plugin config key is deprecated") == 1


def test_numbers_are_renamed_too() -> None:
    doc = {
        "model_config_list": [
            {
                "config": {
                    "name": "m",
                    "base_path": "/models/m",
                    "plugin_config": {
                        "CPU_THROUGHPUT_STREAMS": 4,
                        "GPU_THROUGHPUT_STREAMS": "GPU_THROUGHPUT_AUTO",
                        "CPU_THREADS_NUM": 2,
                        "CPU_BIND_THREAD": "YES",
                    },
                }
            }
        ]
    }
    assert dict(parse_config(json.dumps(doc).encode()).models[0].plugin_config) == {
        "NUM_STREAMS": 4,
        "PERFORMANCE_HINT": "THROUGHPUT",
        "INFERENCE_NUM_THREADS": 2,
        "ENABLE_CPU_PINNING": True,
    }


def test_bad_bind_thread_value_is_a_config_error() -> None:
    doc = {
        "model_config_list": [
            {
                "config": {
                    "name": "m",
                    "base_path": "/models/m",
                    "plugin_config": {"CPU_BIND_THREAD": "ALL"},
                }
            }
        ]
    }
    with pytest.raises(ConfigError, match=r"plugin_config\.CPU_BIND_THREAD: expected one of YES"):
        parse_config(json.dumps(doc).encode())


def test_unknown_key_fails_the_load_with_its_name(repo: Path, tmp_path: Path) -> None:
    manager = ModelManager.start(
        Settings(
            model_name="scaler",
            model_path=str(repo),
            cache_dir=str(tmp_path),
            model_options={"plugin_config": {"CPU_THROUGHPUT_STRAEMS": "4"}},
        )
    )
    status = manager.models["scaler"].versions[1].status
    assert status.state is State.LOADING and status.error_code == "UNKNOWN"
    assert "Unsupported property CPU_THROUGHPUT_STRAEMS" in status.error_message


# -- the command line, as written on the slide ---------------------------------------------------


def _serve(repo: Path, workdir: Path, args: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = (workdir / "serve.log").open("wb")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OVS_")}
    process = subprocess.Popen(
        [
            console_script(),
            "serve",
            "--model_name",
            "scaler",
            "--model_path",
            str(repo),
            "--port",
            str(free_port()),
            "--rest_port",
            str(port),
            "--cache_dir",
            str(workdir),
            "--shutdown_grace_seconds",
            "1",
            *args,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    return process, f"http://127.0.0.1:{port}"


def _wait_ready(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    import time

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        try:
            if requests.get(url + "/v2/health/ready", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise AssertionError(log.read_text())


def _gauge(metrics: str, family: str) -> float:
    found = re.search(rf'^{family}\{{name="scaler",version="1"\}} (\S+)$', metrics, re.M)
    assert found, metrics
    return float(found.group(1))


def test_the_full_slide_28_line_serves(repo: Path, tmp_path: Path) -> None:
    process, url = _serve(repo, tmp_path, FULL_LINE)
    try:
        _wait_ready(process, url, tmp_path / "serve.log")
        status = requests.get(url + "/v1/models/scaler", timeout=30).json()
        assert status["model_version_status"][0]["state"] == "AVAILABLE", status
        reply = requests.post(
            url + "/v1/models/scaler:predict", timeout=30, json={"instances": [[1, 2, 3, 4]]}
        )
        assert reply.json() == {"predictions": [[2.0, 4.0, 6.0, 8.0]]}
        metrics = requests.get(url + "/metrics", timeout=30).text
        assert _gauge(metrics, "ovms_infer_req_queue_size") == 32
        streams = expected({"NUM_STREAMS": "32", "ENABLE_CPU_PINNING": False})["NUM_STREAMS"]
        assert _gauge(metrics, "ovms_streams") == int(streams)
    finally:
        process.terminate()
        process.wait(timeout=30)
    log = (tmp_path / "serve.log").read_text()
    assert "CPU_THROUGHPUT_STREAMS plugin config key is deprecated. Use NUM_STREAMS" in log
    assert "CPU_BIND_THREAD plugin config key is deprecated. Use ENABLE_CPU_PINNING" in log
    assert "Unsupported property" not in log


@pytest.mark.parametrize(("legacy", "modern"), SLIDE_28)
def test_flag_line_loads(legacy: str, modern: dict[str, Any], repo: Path, tmp_path: Path) -> None:
    """`--plugin_config '<line>'` as written: the version loads (its streams gauge is what
    OpenVINO gives for the modern keys over this host's default hint) and the log names the
    new key."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OVS_")}
    done = subprocess.run(
        [
            console_script(),
            "invoke",
            "GET",
            "/metrics",
            "--model_name",
            "scaler",
            "--model_path",
            str(repo),
            "--cache_dir",
            str(tmp_path),
            "--plugin_config",
            legacy,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    compiled = ov.Core().compile_model(  # invoke's host default, then the modern keys
        models.scaler(2.0, shape=(1, 4)),
        "CPU",
        {"PERFORMANCE_HINT": "LATENCY", **{k: str(v) for k, v in modern.items()}},
    )
    assert _gauge(done.stdout, "ovms_streams") == int(compiled.get_property("NUM_STREAMS"))
    for key, new_key in zip(json.loads(legacy), modern, strict=True):
        assert f"{key} plugin config key is deprecated. Use {new_key} instead" in done.stderr
