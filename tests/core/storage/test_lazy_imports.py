"""Serving from local disk never imports a cloud SDK (cold start on a Lambda)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.emulators import REPO

# (the venv's namespace-package .pth files pre-create the empty `google`, `google.cloud`)
SDKS = (
    "boto3",
    "botocore",
    "s3transfer",
    "google.cloud.storage",
    "google.auth",
    "google.api_core",
    "azure",
)

PROBE = """
import json, sys, tempfile, pathlib
import core.storage
from core.storage import open_repository
base = pathlib.Path(sys.argv[1])
(base / "1").mkdir()
(base / "1" / "model.xml").write_text("<net/>")
repo = open_repository(str(base), pathlib.Path(tempfile.mkdtemp()))
assert list(repo.versions()) == [1]
assert repo.fetch(1).folder.is_dir()
assert core.storage.read_file(str(base / "1" / "model.xml")) == b"<net/>"
print(json.dumps(sorted(sys.modules)))
"""


def test_local_repository_imports_no_cloud_sdk(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path)],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    modules = json.loads(out.stdout)
    assert _sdk_modules(modules) == []
    assert "core.storage.local" in modules
    assert not {"core.storage.s3", "core.storage.gcs", "core.storage.azure"} & set(modules)


def test_remote_modules_import_without_touching_their_sdk() -> None:
    probe = "import json, sys, core.storage.s3, core.storage.gcs, core.storage.azure; "
    probe += "print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert _sdk_modules(json.loads(out.stdout)) == []


def _sdk_modules(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == s or m.startswith(s + ".") for s in SDKS)]
