"""Each server image's exact command, reached through a pod address as a kubelet reaches it.

For the server image (ENTRYPOINT + CMD) and each manifest that runs it (ENTRYPOINT + the
container's `args`), tests/handlers/netns_probe.py starts the command with the image's ENV and
the container's env, as the image's USER, in a private network namespace whose only
non-loopback address is the pod IP; then the manifest's probes (and gRPC health) go to that IP.

The server image's default command serves the demo repository its build writes: the build's
own `ov-serverless demo-repo` line runs here, and the packages the image does not install
(other platforms' runtimes) cannot be imported by the server.

Simulated, not real: no image is built (the venv stands in for /opt/venv), the model
repository path in the command (/opt/models, /models, /mnt/models or a bucket URL) is replaced
by a local folder, and OVS_CACHE_DIR by a scratch folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.handlers.conftest import ROOT, Repo
from tests.test_infra import (
    DOCKERFILES,
    MANIFESTS,
    ImageConfig,
    arg_value,
    containers,
    env_of,
    image_config,
    load_docs,
)

PROBE_SCRIPT = Path(__file__).with_name("netns_probe.py")
PREDICT = {
    "kind": "post",
    "port": 8000,
    "path": "/v1/models/scaler:predict",
    "body": '{"instances": [[1, 2, 3, 4]]}',
}

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"),
    reason="needs root, unshare and ip (network namespaces)",
)


@pytest.fixture(scope="module")
def shared_repo(repo: Repo) -> Iterator[tuple[Path, Path]]:
    """The test repository where the image's non-root user can read it, and a cache it can
    write (pytest's own tmp folders are private to root)."""
    top = Path(tempfile.mkdtemp(prefix="ovs-netns-"))
    models = top / "models"
    shutil.copytree(repo.config.parent, models, ignore=shutil.ignore_patterns("cache"))
    cache = top / "cache"
    cache.mkdir()
    for path in [top, *top.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o644)
    yield models / "config.json", cache
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def baked_demo(shared_repo: tuple[Path, Path]) -> Path:
    """The demo repository written by the build's own command (RUN ... demo-repo DIR)."""
    from tests.test_infra import instr

    run = " ".join(instr(DOCKERFILES["server"], "RUN"))
    written = re.search(r"(ov-serverless demo-repo) (\S+)", run)
    assert written
    out = shared_repo[0].parent.parent / "demo-models"
    argv = [str(Path(sys.executable).parent / "ov-serverless"), "demo-repo", str(out)]
    subprocess.run(
        argv,
        check=True,
        cwd=ROOT,
        capture_output=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    for path in [out, *out.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return out / "config.json"


@pytest.fixture(scope="module")
def server_only(shared_repo: tuple[Path, Path]) -> Path:
    """A sitecustomize that makes the packages outside the [server] extra unimportable, as
    they are in the server image."""
    from importlib.metadata import packages_distributions

    from packaging.utils import canonicalize_name

    sys.path.insert(0, str(ROOT / "infra"))
    try:
        import lock
    finally:
        sys.path.remove(str(ROOT / "infra"))
    absent = set(lock.closure(lock.IMAGE_EXTRAS)) - set(lock.closure(("server",)))
    blocked = sorted(
        module
        for module, dists in packages_distributions().items()
        if all(canonicalize_name(d) in absent for d in dists)
    )
    assert "awslambdaric" in blocked and "functions_framework" in blocked
    folder = shared_repo[0].parent.parent / "server-only"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE.format(blocked=blocked))
    folder.chmod(0o755)
    (folder / "sitecustomize.py").chmod(0o644)
    return folder


SITECUSTOMIZE = """
import sys

ABSENT = set({blocked!r})


class NotInTheImage:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ABSENT:
            raise ImportError(f"{{name}} is not installed in the server image")
        return None


sys.meta_path.insert(0, NotInTheImage())
"""


def _map_paths(argv: list[str], config: Path) -> list[str]:
    out = list(argv)
    for i, arg in enumerate(out[:-1]):
        if arg == "--config_path":
            out[i + 1] = str(config)
    return out


def _env(image: ImageConfig, container_env: dict[str, str], cache: Path) -> dict[str, str]:
    env = {k: v for k, v in image.env.items() if k != "PATH"} | container_env
    env.pop("STORAGE_URI", None)  # read by KServe's storage initializer, not by the server
    env["OVS_CACHE_DIR"] = str(cache)
    env["PATH"] = f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin"
    env["PYTHONPATH"] = str(ROOT)
    env["HOME"] = "/tmp"
    return env


def _uid(user: str) -> int | None:
    name = user.split(":")[0]
    return int(name) if name.isdigit() and name != "0" else None


def _probe_spec(probe: dict[str, Any], ports: dict[str, int]) -> dict[str, Any]:
    if "httpGet" in probe:
        port = probe["httpGet"]["port"]
        return {
            "kind": "http",
            "path": probe["httpGet"]["path"],
            "port": ports.get(port, port) if isinstance(port, str) else int(port),
        }
    grpc = probe["grpc"]
    return {"kind": "grpc", "port": int(grpc["port"]), "service": grpc.get("service", "")}


def run_in_namespace(
    argv: list[str],
    env: dict[str, str],
    uid: int | None,
    probes: list[dict[str, Any]],
    tmp_path: Path,
    cwd: Path = Path("/tmp"),
) -> dict[str, Any]:
    spec = tmp_path / "spec.json"
    log = tmp_path / "server.log"
    spec.write_text(
        json.dumps(
            {
                "argv": argv,
                "env": env,
                "uid": uid,
                "probes": probes,
                "log": str(log),
                "cwd": str(cwd),
                "timeout": 150,
            }
        )
    )
    proc = subprocess.run(
        ["unshare", "--mount", "--net", "--", sys.executable, str(PROBE_SCRIPT), str(spec)],
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["log"] = log.read_text() if log.exists() else ""
    return result


def assert_all_pass(result: dict[str, Any]) -> None:
    failed = [p for p in result["probes"] if not p["ok"]]
    assert not failed, f"{failed}\nserver log:\n{result['log'][-3000:]}"
    assert result["exit_code"] == 0, result["log"][-3000:]


def test_server_image_default_command(
    shared_repo: tuple[Path, Path], baked_demo: Path, server_only: Path, tmp_path: Path
) -> None:
    """`docker run -p 8000:8000 -p 9000:9000 IMAGE`: the published ports reach the pod IP,
    and the defaults (the baked demo repository) answer."""
    _, cache = shared_repo
    image = image_config(DOCKERFILES["server"])
    assert image.env["OVS_CONFIG_PATH"] == arg_value(image.cmd, "--config_path")
    healthcheck = _healthcheck_argv()
    probes = [
        {"kind": "http", "port": 8000, "path": "/v2/health/ready"},
        {"kind": "http", "port": 8000, "path": "/v2/health/live"},
        {"kind": "grpc", "port": 9000},
        PREDICT,
        {"kind": "exec", "argv": healthcheck},
    ]
    env = _env(image, {}, cache) | {
        "OVS_CONFIG_PATH": str(baked_demo),
        "PYTHONPATH": f"{server_only}:{ROOT}",
    }
    result = run_in_namespace(
        _map_paths(image.argv, baked_demo), env, _uid(image.user), probes, tmp_path
    )
    assert_all_pass(result)
    assert json.loads(result["probes"][3]["body"]) == {"predictions": [[2.0, 4.0, 6.0, 8.0]]}


@pytest.mark.parametrize("name", ["k8s", "kserve"])
def test_manifest_probes_reach_the_pod_ip(
    name: str, shared_repo: tuple[Path, Path], tmp_path: Path
) -> None:
    """ENTRYPOINT + each container's args (Kubernetes `args` replace CMD), its env, and every
    probe it declares, sent to the pod IP; gRPC health on 9000 too."""
    config, cache = shared_repo
    image = image_config(DOCKERFILES["server"])
    runs: dict[str, tuple[list[str], dict[str, str], list[dict[str, Any]]]] = {}
    for doc in load_docs(MANIFESTS[name]):
        if doc["kind"] not in ("Deployment", "InferenceService"):
            continue
        (c,) = containers(doc)
        argv = image.entrypoint + (c.get("args") or image.cmd)
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        probes = [
            _probe_spec(c[k], ports)
            for k in ("startupProbe", "readinessProbe", "livenessProbe")
            if k in c
        ]
        key = json.dumps([argv, env_of(c)])
        runs.setdefault(key, (argv, env_of(c), []))[2].extend(probes)
    assert runs
    for argv, env, probes in runs.values():
        probes += [{"kind": "grpc", "port": 9000}, PREDICT]
        result = run_in_namespace(
            _map_paths(argv, config), _env(image, env, cache), _uid(image.user), probes, tmp_path
        )
        assert_all_pass(result)


def _healthcheck_argv() -> list[str]:
    from tests.test_infra import instr

    (check,) = instr(DOCKERFILES["server"], "HEALTHCHECK")
    argv: list[str] = json.loads(check.split(" CMD ", 1)[1])
    return argv


def test_cloud_run_image_with_service_yaml(shared_repo: tuple[Path, Path], tmp_path: Path) -> None:
    """The Cloud Run image's exact functions-framework CMD with service.yaml's env and probes
    on the pod IP; SIGTERM (Cloud Run's shutdown) then ends it with exit code 0."""
    config, cache = shared_repo
    image = image_config(DOCKERFILES["cloudrun"])
    (svc,) = load_docs(MANIFESTS["cloudrun"])
    (c,) = containers(svc)
    env = _env(image, env_of(c), cache) | {"OVS_CONFIG_PATH": str(config)}
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    probes = [_probe_spec(c[k], ports) for k in ("startupProbe", "livenessProbe")]
    probes.append(PREDICT | {"port": int(env["PORT"])})
    # WORKDIR /app holds the installed `handlers` package as ./handlers: the checkout does too.
    result = run_in_namespace(image.argv, env, _uid(image.user), probes, tmp_path, cwd=ROOT)
    assert_all_pass(result)
