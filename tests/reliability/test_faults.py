"""Faults while serving, each bounded in time: model files deleted or corrupted, the config
broken, SIGTERM under load, stalled clients and deadlines, and a bug in a route handler."""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests

from core.api import App, Response, make_request
from core.config import Settings
from core.serving.registry import ModelManager
from protos.gen.kserve import grpc_predict_v2_pb2 as kfs
from protos.gen.kserve import grpc_predict_v2_pb2_grpc
from tests.core.helpers import RunningServer, kserve_binary_request
from tests.reliability.helpers import SCALER_X, build_repository, free_port, wait_for


def _predict_ok(server: RunningServer) -> None:
    response = server.post("/v1/models/scaler:predict", {"instances": SCALER_X})
    assert response.status_code == 200, response.text
    assert response.json() == {"predictions": [[3.0, 6.0, 9.0, 12.0]]}


def _slow_body(batch: int = 16) -> tuple[bytes, dict[str, str]]:
    """A KServe binary request to `slow`: tens to hundreds of ms of inference, little parsing."""
    return kserve_binary_request(
        {"inputs": [{"name": "x", "shape": [batch, 256, 256], "datatype": "FP32"}]},
        np.full((batch, 256, 256), 0.5, np.float32).tobytes(),
    )


MAX_SLOW_BATCH = 224  # 224 x 256 x 256 float32: just under the 64 MB body limit


def _timed_slow_body(url: str, target: float = 0.8) -> tuple[bytes, dict[str, str], float]:
    """A `slow` request sized from what an item costs on this machine to take about `target`
    seconds (from 1 item, on a slow CPU, to the body limit), so that a test can act while it
    runs; with its time alone."""
    _post_timed(url, *_slow_body(1))  # warm-up
    batch = 1
    body, headers = _slow_body(batch)
    single = _post_timed(url, body, headers)
    for _ in range(3):  # each step measures the batch the previous one chose
        wanted = min(MAX_SLOW_BATCH, max(1, round(batch * target / single)))
        if abs(wanted - batch) <= batch * 0.2:
            break
        batch = wanted
        body, headers = _slow_body(batch)
        single = _post_timed(url, body, headers)
    return body, headers, single


def _post_timed(url: str, body: bytes, headers: dict[str, str]) -> float:
    started = time.monotonic()
    assert requests.post(url, data=body, headers=headers, timeout=120).status_code == 200
    return time.monotonic() - started


@pytest.fixture
def private(tmp_path: Path) -> Iterator[tuple[Path, RunningServer]]:
    """A fresh repository the test may damage, served without polling (reload on request)."""
    root = build_repository(tmp_path / "repo")
    server = RunningServer(
        root / "config.json",
        tmp_path,
        ("--file_system_poll_wait_seconds", "0", "--log_level", "INFO"),
    )
    yield root, server
    server.stop()


@pytest.mark.parametrize("damage", ["delete-bin", "delete-xml", "corrupt-xml", "truncate-bin"])
def test_model_file_damaged_while_serving(private: tuple[Path, RunningServer], damage: str) -> None:
    root, server = private
    folder = root / "scaler" / "1"
    _predict_ok(server)
    if damage == "delete-bin":
        (folder / "model.bin").unlink()
    elif damage == "delete-xml":
        (folder / "model.xml").unlink()
    elif damage == "corrupt-xml":
        (folder / "model.xml").write_text("<net><garbage")
    else:
        (folder / "model.bin").write_bytes((folder / "model.bin").read_bytes()[:3])
    reload = server.post("/v1/config/reload")
    assert reload.status_code in (200, 201), reload.text
    _predict_ok(server)  # the loaded version keeps serving
    status = server.get("/v1/models/scaler").json()["model_version_status"]
    assert [v["state"] for v in status] == ["AVAILABLE"]
    if damage != "delete-xml":  # a missing file is a removed version for OVMS, kept here
        assert wait_for(lambda: "failed to load" in server.log(), 5), server.log()
        assert any(
            json.loads(line).get("level") == "ERROR"
            for line in server.log().splitlines()
            if "failed to load" in line
        )


def test_config_broken_while_serving(private: tuple[Path, RunningServer]) -> None:
    root, server = private
    config = root / "config.json"
    good = config.read_text()
    for broken in ("{broken", json.dumps({"model_config_list": [{"config": {"name": 5}}]}), ""):
        config.write_text(broken)
        reload = server.post("/v1/config/reload")
        assert reload.status_code >= 400, reload.text
        assert set(reload.json()) == {"error"}
        _predict_ok(server)
        assert server.get("/v1/config").status_code == 200
    config.write_text(good)
    assert server.post("/v1/config/reload").status_code in (200, 201)
    _predict_ok(server)


def test_sigterm_finishes_in_flight_requests(tmp_path: Path) -> None:
    """SIGTERM under load: the listener closes at once (new connections refused) while the
    requests already in flight finish with 200, and the process exits 0 within the grace."""
    root = build_repository(tmp_path / "repo")
    grace = 10.0
    server = RunningServer(
        root / "config.json",
        tmp_path,
        ("--log_level", "WARNING", "--shutdown_grace_seconds", str(grace)),
    )
    url = server.url + "/v2/models/slow/infer"
    body, headers, single = _timed_slow_body(url, target=min(0.8, grace / 10))
    results: list[int | str] = []
    finished: list[float] = []
    in_flight = threading.Semaphore(0)

    def call() -> None:
        try:
            in_flight.release()
            results.append(
                requests.post(url, data=body, headers=headers, timeout=grace + 60).status_code
            )
            finished.append(time.monotonic())
        except requests.RequestException as exc:
            results.append(type(exc).__name__)

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    for _ in threads:
        in_flight.acquire(timeout=5)
    time.sleep(min(single / 2, 0.2))  # the bodies are sent; the model is busy with them
    sent = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    refused_at = _refused_within(server.port, 3.0)
    for thread in threads:
        thread.join(timeout=grace + 60)
    code = server.process.wait(timeout=grace + 30)
    exited = time.monotonic() - sent
    log = server.log()
    server.stop()
    assert results == [200] * 4, (results, log)
    assert refused_at is not None, "new connections were still accepted after SIGTERM"
    assert refused_at < max(finished), "new connections hung until the process exited"
    assert min(finished) > sent, f"requests ended before SIGTERM (single {single:.2f}s)"
    assert code == 0, log
    assert exited < grace, (exited, f"single {single:.2f}s")


def test_sigterm_drains_grpc_beside_rest(tmp_path: Path) -> None:
    """REST + gRPC: on SIGTERM gRPC stops taking new calls at once, while a REST request is
    still in flight (not after the REST drain), and that request still finishes with 200."""
    root = build_repository(tmp_path / "repo")
    port = free_port()
    server = RunningServer(
        root / "config.json",
        tmp_path,
        ("--port", str(port), "--grpc_bind_address", "127.0.0.1", "--shutdown_grace_seconds", "20"),
    )
    url = server.url + "/v2/models/slow/infer"
    body, headers, single = _timed_slow_body(url)
    rest: list[int] = []
    caller = threading.Thread(
        target=lambda: rest.append(
            requests.post(url, data=body, headers=headers, timeout=60).status_code
        )
    )
    small = kfs.ModelInferRequest(model_name="scaler")
    small.inputs.add(name="x", datatype="FP32", shape=[1, 4])
    small.raw_input_contents.append(np.ones(4, np.float32).tobytes())
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = grpc_predict_v2_pb2_grpc.GRPCInferenceServiceStub(channel)
            stub.ModelInfer(small, timeout=10)
            caller.start()
            time.sleep(min(single / 3, 0.2))
            server.process.send_signal(signal.SIGTERM)
            time.sleep(0.1)
            with pytest.raises(grpc.RpcError) as caught:
                stub.ModelInfer(small, timeout=5)
            refused_while_busy = caller.is_alive()
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        caller.join(timeout=60)
        assert rest == [200], server.log()
        assert refused_while_busy, f"the REST request ended first (single {single:.2f}s)"
        assert server.process.wait(timeout=30) == 0
    finally:
        server.stop()


def _refused_within(port: int, seconds: float) -> float | None:
    """When a new TCP connection is first refused (None: still accepted after `seconds`)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        except OSError:
            return time.monotonic()
        time.sleep(0.02)
    return None


def _ten_predicts(server: RunningServer) -> float:
    started = time.monotonic()
    for _ in range(10):
        _predict_ok(server)
    return time.monotonic() - started


def test_stalled_client_does_not_block_others(private: tuple[Path, RunningServer]) -> None:
    """Blocked, the predicts would wait for the 30 s read timeout; free, they take about what
    they take without the stalled client (measured first)."""
    _, server = private
    alone = _ten_predicts(server)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as stalled:
        stalled.sendall(
            b"POST /v1/models/scaler:predict HTTP/1.1\r\nHost: x\r\n"
            b'Content-Length: 100\r\n\r\n{"inst'
        )
        beside = _ten_predicts(server)
        assert beside < min(10 * alone + 2.0, 25.0), (beside, alone)
    _predict_ok(server)


def test_slow_clients_cannot_hold_every_thread(tmp_path: Path) -> None:
    """Slowloris: more half-sent requests than REST threads. Each stalled socket gets a 408
    after --rest_read_timeout_seconds (its head or its body not received in time), so good
    requests keep being answered and nothing hangs."""
    root = build_repository(tmp_path / "repo")
    read_timeout = 1.0
    server = RunningServer(
        root / "config.json",
        tmp_path,
        ("--rest_workers", "2", "--rest_read_timeout_seconds", str(read_timeout)),
    )
    stalled = []
    try:
        started = time.monotonic()
        for _ in range(3):
            _predict_ok(server)
        alone = time.monotonic() - started
        for index in range(4):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            sock.sendall(
                b"POST /v1/models/scaler:predict HTTP/1.1\r\nHost: x\r\n"
                + (b'Content-Length: 100\r\n\r\n{"inst' if index % 2 else b"X-A")
            )
            stalled.append(sock)
        started = time.monotonic()
        for _ in range(3):
            response = requests.post(
                server.url + "/v1/models/scaler:predict", json={"instances": SCALER_X}, timeout=15
            )
            assert response.status_code == 200, response.text
        # 4 stalled sockets on 2 threads hold them for 2 read timeouts at most
        took = time.monotonic() - started
        assert took < 10 * alone + 2 * read_timeout + 3.0, (took, alone)
        for index, sock in enumerate(stalled):
            reply = sock.recv(65536)  # the server has answered every one of them, then closed
            part = b"body" if index % 2 else b"head"
            assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
            assert b"Request " + part + b" not received in time" in reply
        _predict_ok(server)
    finally:
        for sock in stalled:
            sock.close()
        server.stop()


def test_grpc_deadline_is_honoured(tmp_path: Path) -> None:
    root = build_repository(tmp_path / "repo")
    port = free_port()
    server = RunningServer(
        root / "config.json", tmp_path, ("--port", str(port), "--grpc_bind_address", "127.0.0.1")
    )
    try:
        request = kfs.ModelInferRequest(model_name="slow")
        request.inputs.add(name="x", datatype="FP32", shape=[64, 256, 256])
        request.raw_input_contents.append(np.full((64, 256, 256), 0.5, np.float32).tobytes())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = grpc_predict_v2_pb2_grpc.GRPCInferenceServiceStub(channel)
            started = time.monotonic()
            with pytest.raises(grpc.RpcError) as caught:
                stub.ModelInfer(request, timeout=0.05)
            assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            assert time.monotonic() - started < 2
            small = kfs.ModelInferRequest(model_name="scaler")
            small.inputs.add(name="x", datatype="FP32", shape=[1, 4])
            small.raw_input_contents.append(np.ones(4, np.float32).tobytes())
            reply = stub.ModelInfer(small, timeout=10)
            assert np.allclose(np.frombuffer(reply.raw_output_contents[0], np.float32), 3.0)
        _predict_ok(server)
    finally:
        server.stop()


def test_bug_in_a_route_is_a_json_500_in_process(tmp_path: Path) -> None:
    root = build_repository(tmp_path / "repo")
    shutil.rmtree(root / "slow")
    settings = Settings(config_path=str(root / "config.json"), cache_dir=str(tmp_path / "c"))
    app = App(ModelManager.start(settings), settings)

    def broken(request: object, match: object) -> Response:
        raise KeyError("secret-payload-fragment")

    app._routes.insert(0, (re.compile(r"/boom"), {"GET": broken}))
    for _ in range(3):
        response = app.handle(make_request("GET", "/boom"))
        assert response.status == 500
        assert json.loads(response.body) == {"error": "Internal server error: KeyError"}
        good = app.handle(
            make_request(
                "POST", "/v1/models/scaler:predict", json.dumps({"instances": SCALER_X}).encode()
            )
        )
        assert good.status == 200, good.body
