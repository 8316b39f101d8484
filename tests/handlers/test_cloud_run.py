"""handlers.cloud_run under the REAL functions-framework CLI, called by the real clients
(ovmsclient for the TF Serving API, tritonclient for KServe v2), checked against OpenVINO."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import functions_framework
import numpy as np
import openvino as ov
import orjson
import ovmsclient
import pytest
import requests
import tritonclient.http as triton

import core.logs
from bench.common import tree
from tests.handlers.conftest import (
    ROOT,
    Call,
    Repo,
    ff_command,
    free_port,
    kserve_binary,
    outputs,
    running,
    server_env,
)

RTOL, ATOL = 1e-5, 1e-6


def test_ovmsclient(
    servers: dict[str, str], tensor: np.ndarray, reference: Callable[[np.ndarray], np.ndarray]
) -> None:
    client = ovmsclient.make_http_client(servers["cloud_run"].removeprefix("http://"))
    status = client.get_model_status("classifier")
    assert status[1]["state"] == "AVAILABLE"
    metadata = client.get_model_metadata("classifier")
    assert metadata["inputs"]["input"]["shape"] == [-1, 3, 224, 224]
    assert metadata["outputs"]["probabilities"]["dtype"] == "DT_FLOAT"
    got = client.predict({"input": tensor}, "classifier")
    np.testing.assert_allclose(got, reference(tensor), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("binary", [False, True])
def test_tritonclient(
    servers: dict[str, str],
    tensor: np.ndarray,
    binary: bool,
    reference: Callable[[np.ndarray], np.ndarray],
) -> None:
    client = triton.InferenceServerClient(servers["cloud_run"].removeprefix("http://"))
    assert client.is_server_ready() and client.is_model_ready("classifier")
    data = triton.InferInput("input", list(tensor.shape), "FP32")
    data.set_data_from_numpy(tensor, binary_data=binary)
    wanted = triton.InferRequestedOutput("probabilities", binary_data=binary)
    result = client.infer("classifier", [data], outputs=[wanted])
    np.testing.assert_allclose(
        result.as_numpy("probabilities"), reference(tensor), rtol=RTOL, atol=ATOL
    )


def test_limits_and_errors_with_the_test_client(serving_env: pytest.MonkeyPatch) -> None:
    serving_env.setenv("OVS_MAX_REQUEST_BYTES", "1000")
    client = functions_framework.create_app(
        "predict", str(ROOT / "handlers" / "cloud_run.py")
    ).test_client()
    reply = client.post("/v1/models/scaler:predict", data=b"x" * 2000)
    assert reply.status_code == 413
    assert "exceeds the limit of 1000 bytes" in orjson.loads(reply.data)["error"]
    # refused before the router reads it: still in the OpenAI shape on an OpenAI route
    reply = client.post("/v3/embeddings", data=b"x" * 2000, headers={"Origin": "https://a.example"})
    assert reply.status_code == 413 and reply.headers["Access-Control-Allow-Origin"] == "*"
    error = orjson.loads(reply.data)["error"]
    assert error["type"] == "invalid_request_error" and "limit of 1000 bytes" in error["message"]
    reply = client.get("/v3/nothing")
    assert reply.status_code == 404 and reply.json == {
        "error": {
            "message": "Invalid URL (GET /v3/nothing)",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }
    reply = client.post(
        "/v1/models/scaler:predict",
        json={"instances": [[1, 2, 3, 4]]},
        headers={"X-Cloud-Trace-Context": "105445aa7843bc8bf206b1200/1;o=1"},
    )
    assert reply.status_code == 200 and reply.json == {"predictions": [[2.0, 4.0, 6.0, 8.0]]}
    assert core.logs.request_id.get() == "105445aa7843bc8bf206b1200"


def test_a_throughput_model_serves_from_gunicorns_forked_worker(
    repo: Repo, tmp_path: Path, tensor: np.ndarray, reference: Callable[[np.ndarray], np.ndarray]
) -> None:
    """infra/cloudrun/service.yaml's THROUGHPUT hint under the real CLI. gunicorn imports the
    handler in its arbiter and then forks the worker; OpenVINO's stream threads do not survive
    a fork, so a model compiled in the arbiter hung every request. It loads in the worker.
    gunicorn's control socket stays off, so the arbiter takes no CPU from that load."""
    port = free_port()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = server_env(
        repo,
        OVS_CONCURRENT="1",
        THREADS="4",  # as infra/cloudrun ships
        XDG_RUNTIME_DIR=str(run_dir),
    )
    body, headers = kserve_binary(tensor)
    call = Call("kserve-binary", "POST", "/v2/models/classifier/infer")

    def infer(_: int) -> np.ndarray:
        reply = requests.post(
            f"http://127.0.0.1:{port}{call.path}", data=body, headers=headers, timeout=20
        )
        return outputs(call, reply.status_code, dict(reply.headers), reply.content)

    with running({"cloud_run": (ff_command(port), port)}, env, tmp_path) as procs:
        with ThreadPoolExecutor(4) as pool:
            for got in pool.map(infer, range(8)):
                np.testing.assert_allclose(got, reference(tensor), rtol=RTOL, atol=ATOL)
        streams = (
            ov.Core()
            .compile_model(repo.classifier_xml, "CPU", {"PERFORMANCE_HINT": "THROUGHPUT"})
            .get_property("NUM_STREAMS")
        )
        wanted = f'ovms_streams{{name="classifier",version="1"}} {float(streams)}'
        deadline = time.monotonic() + 30  # the THROUGHPUT variant compiles after the first answer
        while wanted not in (
            exposition := requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        ):
            assert time.monotonic() < deadline, exposition
            time.sleep(0.1)
        with ThreadPoolExecutor(4) as pool:  # on the THROUGHPUT variant's streams
            for got in pool.map(infer, range(8)):
                np.testing.assert_allclose(got, reference(tensor), rtol=RTOL, atol=ATOL)
        arbiter = procs["cloud_run"].pid
        (_, worker) = tree(arbiter)
        assert "openvino_intel_cpu_plugin" in Path(f"/proc/{worker}/maps").read_text()
        assert "openvino_intel_cpu_plugin" not in Path(f"/proc/{arbiter}/maps").read_text()
        # gunicorn's control socket (an asyncio server in the arbiter) is off: no socket, and
        # the arbiter runs one thread, so the worker's compile has the instance's CPUs
        assert list(run_dir.iterdir()) == []
        assert len(list(Path(f"/proc/{arbiter}/task").iterdir())) == 1


_FORKS = """
import os, threading, time
import handlers.cloud_run  # registers its fork hooks, as in gunicorn's arbiter

def compiled_within(seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with open("/proc/self/maps") as maps:
            if "openvino_intel_cpu_plugin" in maps.read():
                return True
        time.sleep(0.05)
    return False

def fork(seconds):
    pid = os.fork()
    if pid == 0:
        os._exit(10 if compiled_within(seconds) else 20)
    return pid

assert not compiled_within(0.1)
children = {"main": fork(30)}
helper = threading.Thread(target=lambda: children.update(helper=fork(3)))
helper.start()
helper.join()
for name, pid in children.items():
    print(name, "compiled" if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 10 else "idle")
"""


def test_only_a_fork_from_the_main_thread_loads_the_models(repo: Repo) -> None:
    """gunicorn forks its worker from the arbiter's main thread. A library forks helpers from
    its own threads (OpenVINO's telemetry, when openvino.tools.ovc is imported): such a child
    used to fetch and compile every model too, on the same two cores as the worker."""
    done = subprocess.run(
        [sys.executable, "-c", _FORKS],
        cwd=ROOT,
        env=server_env(repo),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split("\n")[:2]) == ["helper idle", "main compiled"]
