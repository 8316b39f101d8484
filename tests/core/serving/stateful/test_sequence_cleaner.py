"""OVMS's --sequence_cleaner_poll_wait_minutes (env OVS_SEQUENCE_CLEANER_POLL_WAIT_MINUTES): a
sequence of a stateful model idle that long is dropped; 0 never drops one."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import requests

from core.api import App
from core.config import Settings
from core.serving.registry import ModelManager
from tests.core.helpers import console_script, free_port
from tests.core.serving.pipeline.helpers import call, error
from tests.core.serving.stateful.conftest import Repo, tfs_body

START = 1


def app_with(repo: Repo, tmp_path: Path, minutes: str) -> App:
    settings = Settings.from_env(
        {"OVS_CONFIG_PATH": str(repo.config), "OVS_SEQUENCE_CLEANER_POLL_WAIT_MINUTES": minutes},
        cache_dir=str(tmp_path),
    )
    return App(ModelManager.start(settings), settings)


def test_env_minutes_drop_an_idle_sequence(stateful_repo: Repo, tmp_path: Path) -> None:
    app = app_with(stateful_repo, tmp_path, "0.005")  # 0.3 s
    assert (
        call(app, "POST", "/v1/models/acc:predict", tfs_body([1, 1, 1, 1], 41, START)).status == 200
    )
    time.sleep(1.2)
    reply = call(app, "POST", "/v1/models/acc:predict", tfs_body([1, 1, 1, 1], 41))
    assert reply.status == 404
    assert error(reply) == "Sequence with provided ID does not exist - id: 41"


def test_each_manager_keeps_its_own_cleaner_setting(stateful_repo: Repo, tmp_path: Path) -> None:
    """The setting is the manager's, passed to its versions: a second manager built with
    another one leaves the first's sequences alone."""
    keeping = app_with(stateful_repo, tmp_path / "keeping", "0")
    dropping = app_with(stateful_repo, tmp_path / "dropping", "0.005")  # 0.3 s
    for app in (keeping, dropping):
        assert (
            call(app, "POST", "/v1/models/acc:predict", tfs_body([1, 1, 1, 1], 43, START)).status
            == 200
        )
    time.sleep(1.2)
    assert (
        call(dropping, "POST", "/v1/models/acc:predict", tfs_body([1, 1, 1, 1], 43)).status == 404
    )
    assert call(keeping, "POST", "/v1/models/acc:predict", tfs_body([1, 1, 1, 1], 43)).status == 200


def test_zero_never_drops_a_sequence(stateful_repo: Repo, tmp_path: Path) -> None:
    app = app_with(stateful_repo, tmp_path, "0")
    call(app, "POST", "/v1/models/acc:predict", tfs_body([1, 1, 1, 1], 42, START))
    time.sleep(1.2)
    assert call(app, "POST", "/v1/models/acc:predict", tfs_body([1, 1, 1, 1], 42)).status == 200


def test_bad_env_value_is_a_config_error(stateful_repo: Repo) -> None:
    from core.errors import ConfigError

    with pytest.raises(ConfigError, match="OVS_SEQUENCE_CLEANER_POLL_WAIT_MINUTES: must be >= 0"):
        Settings.from_env({"OVS_SEQUENCE_CLEANER_POLL_WAIT_MINUTES": "-1"})


def test_the_serve_flag(stateful_repo: Repo, tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OVS_")}
    with (tmp_path / "serve.log").open("wb") as log:
        server = subprocess.Popen(
            [
                console_script(),
                "serve",
                "--config_path",
                str(stateful_repo.config),
                "--rest_port",
                str(port),
                "--cache_dir",
                str(tmp_path),
                "--sequence_cleaner_poll_wait_minutes",
                "0.005",
                "--shutdown_grace_seconds",
                "1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    url = f"http://127.0.0.1:{port}/v1/models/acc:predict"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert server.poll() is None and time.monotonic() < deadline, (
                tmp_path / "serve.log"
            ).read_text()
            try:
                if (
                    requests.get(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2).status_code
                    == 200
                ):
                    break
            except requests.RequestException:
                time.sleep(0.2)
        assert requests.post(url, json=tfs_body([1, 1, 1, 1], 43, START), timeout=30).ok
        time.sleep(1.2)
        reply = requests.post(url, json=tfs_body([1, 1, 1, 1], 43), timeout=30)
        assert reply.status_code == 404, reply.text
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_negative_flag_exits_with_usage(stateful_repo: Repo) -> None:
    done = subprocess.run(
        [
            console_script(),
            "invoke",
            "GET",
            "/v1/models/acc",
            "--config_path",
            str(stateful_repo.config),
            "--sequence_cleaner_poll_wait_minutes",
            "-1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 64
    assert "--sequence_cleaner_poll_wait_minutes: must be >= 0" in done.stderr
