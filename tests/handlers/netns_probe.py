"""Run one container command in a private network namespace and probe it as a kubelet would.

Started by tests/handlers/test_image_network.py as `unshare --mount --net -- python THIS SPEC`
(root). Inside the namespace: loopback up and a veth pair whose pod end carries POD_IP, the
only non-loopback address. The command runs with the image's env and, when the spec names a
uid, as that user (setpriv); every probe goes to POD_IP, never to 127.0.0.1. Prints one JSON
object: the result of every probe, then the exit code after SIGTERM.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

POD_IP = "10.254.77.2"
PEER_IP = "10.254.77.3"


def setup_network() -> None:
    for cmd in (
        "ip link set lo up",
        "ip link add ovs-pod type veth peer name ovs-node",
        f"ip addr add {POD_IP}/24 dev ovs-pod",
        f"ip addr add {PEER_IP}/24 dev ovs-node",
        "ip link set ovs-pod up",
        "ip link set ovs-node up",
    ):
        subprocess.run(cmd.split(), check=True)


def expose_interpreter() -> None:
    """This machine's CPython lives under /root (mode 700); the image's user must read it.
    In this private mount namespace only: /root becomes an empty tmpfs holding .pyenv."""
    pyenv = Path("/root/.pyenv")
    if not pyenv.is_dir():
        return
    keep = tempfile.mkdtemp(prefix="ovs-pyenv-")
    subprocess.run(["mount", "--bind", str(pyenv), keep], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", "/root"], check=True)
    pyenv.mkdir()
    subprocess.run(["mount", "--bind", keep, str(pyenv)], check=True)


def http_probe(port: int, path: str, timeout: float) -> dict[str, Any]:
    url = f"http://{POD_IP}:{port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return {"status": reply.status, "body": reply.read().decode("utf-8", "replace")}
    except urllib.error.HTTPError as exc:
        return {"status": exc.code, "body": exc.read().decode("utf-8", "replace")}
    except OSError as exc:
        return {"status": 0, "error": str(exc)}


def grpc_probe(port: int, service: str, timeout: float) -> dict[str, Any]:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(f"{POD_IP}:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as exc:
            return {"status": str(exc.code()), "error": exc.details()}
    return {"status": health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)}


def exec_probe(argv: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    return {"status": proc.returncode, "error": proc.stderr[-500:]}


def probe(spec: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    kind = spec["kind"]
    if kind == "http":
        result = http_probe(spec["port"], spec["path"], 5)
        return result | {"ok": result["status"] == 200}
    if kind == "grpc":
        result = grpc_probe(spec["port"], spec.get("service", ""), 5)
        return result | {"ok": result["status"] == "SERVING"}
    if kind == "post":
        request = urllib.request.Request(
            f"http://{POD_IP}:{spec['port']}{spec['path']}",
            data=spec["body"].encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as reply:
                result = {"status": reply.status, "body": reply.read().decode()}
        except OSError as exc:
            result = {"status": 0, "error": str(exc)}
        return result | {"ok": result["status"] == 200}
    result = exec_probe(spec["argv"], env, 10)
    return result | {"ok": result["status"] == 0}


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    setup_network()
    argv = list(spec["argv"])
    if spec.get("uid") is not None:
        expose_interpreter()
        uid, gid = spec["uid"], spec.get("gid", spec["uid"])
        argv = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", *argv]
    env = spec["env"]
    with open(spec["log"], "wb") as log:
        server = subprocess.Popen(
            argv, env=env, cwd=spec["cwd"], stdout=log, stderr=subprocess.STDOUT
        )
    results: dict[str, Any] = {"pod_ip": POD_IP, "probes": []}
    deadline = time.monotonic() + spec["timeout"]
    try:
        for item in spec["probes"]:  # each retried like a startup probe until it passes
            while True:
                result = probe(item, env) | {"probe": item}
                if result["ok"] or time.monotonic() > deadline or server.poll() is not None:
                    break
                time.sleep(0.5)
            results["probes"].append(result)
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
        try:
            results["exit_code"] = server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            results["exit_code"] = "killed"
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
