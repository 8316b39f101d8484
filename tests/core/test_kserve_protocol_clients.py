"""The protocol fixes as real clients see them, against `ov-serverless serve` (REST + gRPC):
the kserve SDK's v2 InferenceRESTClient and InferenceGRPCClient (health, readiness, infer),
tritonclient and Python's json reading NaN/Infinity outputs back as the same values, and HEAD
answered with the GET head and no body."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as triton

from demo import models
from tests.conftest import ServerFactory
from tests.core.helpers import RunningServer, free_port, save_ir, write_config
from tests.core.test_kserve_protocol import BIG_X, WANT_BIG, WANT_NAN, nonfinite_model

if importlib.util.find_spec("kserve") is None:  # not imported here: see kserve_sdk_client.py
    pytest.skip("the kserve SDK is not installed", allow_module_level=True)
SDK_CLIENT = Path(__file__).with_name("kserve_sdk_client.py")


@pytest.fixture(scope="module")
def server(
    server_factory: ServerFactory, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RunningServer, int]]:
    root: Path = tmp_path_factory.mktemp("protocol-clients")
    save_ir(models.scaler(3.0), root / "scaler" / "1")
    save_ir(nonfinite_model(), root / "nonfinite" / "1")
    (root / "empty").mkdir()  # no version: never available
    config = write_config(
        root / "config.json",
        [{"name": n, "base_path": n} for n in ("scaler", "nonfinite", "empty")],
    )
    grpc_port = free_port()
    yield server_factory(config, "--port", str(grpc_port)), grpc_port


def _sdk(scenario: str, server: tuple[RunningServer, int]) -> Any:
    """One kserve SDK scenario in a client process of its own (see kserve_sdk_client.py)."""
    rest, grpc_port = server
    proc = subprocess.run(
        [sys.executable, str(SDK_CLIENT), scenario, rest.url, str(grpc_port)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_kserve_rest_client_health_and_readiness(server: tuple[RunningServer, int]) -> None:
    assert _sdk("rest_health", server) == [True, True, True, False, False]


def test_kserve_rest_client_infer_echoes_the_id(server: tuple[RunningServer, int]) -> None:
    assert _sdk("rest_infer", server) == {"id": "req-7", "data": [[3.0, 6.0, 9.0, 12.0]]}


def test_kserve_rest_client_reports_a_bad_id(server: tuple[RunningServer, int]) -> None:
    assert _sdk("rest_bad_id", server) == {"raised": "HTTPStatusError", "status": 400}


def test_kserve_grpc_client_health_readiness_and_infer(server: tuple[RunningServer, int]) -> None:
    assert _sdk("grpc_all", server) == {
        "live": True,
        "ready": True,
        "model_ready": True,
        "data": [[3.0, 6.0, 9.0, 12.0]],
    }


def _same(got: Any, want: list[float]) -> bool:
    """Equal as FP32 values, NaN where NaN is wanted."""
    values = np.asarray(got, np.float32).reshape(-1)
    expected = np.array(want, np.float32)
    return bool(np.array_equal(values, expected, equal_nan=True))


def test_tritonclient_reads_nonfinite_json_outputs_back(server: tuple[RunningServer, int]) -> None:
    rest, _ = server
    client = triton.InferenceServerClient(f"127.0.0.1:{rest.port}")
    x = triton.InferInput("x", [1, 4], "FP32")
    x.set_data_from_numpy(np.array(BIG_X, np.float32))
    outputs = [triton.InferRequestedOutput(n, binary_data=False) for n in ("big", "nan")]
    result = client.infer("nonfinite", [x], outputs=outputs)
    assert _same(result.as_numpy("big"), WANT_BIG) and _same(result.as_numpy("nan"), WANT_NAN)
    binary = client.infer(
        "nonfinite", [x], outputs=[triton.InferRequestedOutput("big", binary_data=True)]
    )
    assert _same(binary.as_numpy("big"), WANT_BIG)


def test_python_json_reads_tfs_nonfinite_outputs_back(server: tuple[RunningServer, int]) -> None:
    rest, _ = server
    answer = rest.post("/v1/models/nonfinite:predict", {"instances": BIG_X})
    assert answer.status_code == 200
    row = json.loads(answer.content)["predictions"][0]
    assert _same(row["big"], WANT_BIG) and _same(row["nan"], WANT_NAN)


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize("path", ["/v2/models/scaler", "/v2/health/ready", "/v1/models/nope"])
def test_head_sends_the_get_head_without_a_body(
    server: tuple[RunningServer, int], path: str
) -> None:
    rest, _ = server
    got = rest.get(path)
    raw = _raw(rest.port, f"HEAD {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
    head, _, body = raw.partition(b"\r\n\r\n")
    assert body == b""
    assert head.split(b"\r\n")[0].split(b" ")[1] == str(got.status_code).encode()
    assert f"content-length: {len(got.content)}".encode() in head.lower()


def test_405_carries_allow_over_http(server: tuple[RunningServer, int]) -> None:
    rest, _ = server
    answer = rest.request("DELETE", "/v2/models/scaler/infer")
    assert answer.status_code == 405 and answer.headers["Allow"] == "POST"
    answer = rest.request("PUT", "/v2/health/live")
    assert answer.status_code == 405 and answer.headers["Allow"] == "GET, HEAD"
