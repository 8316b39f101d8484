"""OVMS's --version: the server's version, then the OpenVINO it runs on, on stdout, exit 0."""

from __future__ import annotations

import subprocess
from importlib.metadata import version

import openvino as ov
import pytest

from tests.core.helpers import console_script


@pytest.mark.parametrize("args", [["--version"], ["serve", "--version"]])
def test_version_prints_both_versions(args: list[str]) -> None:
    done = subprocess.run([console_script(), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"ov-serverless {version('ov-serverless')}",
        f"OpenVINO backend {ov.get_version()}",
    ]
