"""The protocol fixes as real clients see them, against `ov-serverless serve` (REST + gRPC):
the kserve SDK's v2 InferenceRESTClient and InferenceGRPCClient (health, readiness, infer),
tritonclient and Python's json reading NaN/Infinity outputs back as the same values, and HEAD
answered with the GET head and no body."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.http as triton

from demo import models
from tests.conftest import ServerFactory
from tests.core.helpers import RunningServer, free_port, save_ir, write_config
from tests.core.test_kserve_protocol import BIG_X, WANT_BIG, WANT_NAN, nonfinite_model

kserve = pytest.importorskip("kserve")


@pytest.fixture(scope="module")
def server(server_factory: ServerFactory, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[RunningServer, int]]:
    root: Path = tmp_path_factory.mktemp("protocol-clients")
    save_ir(models.scaler(3.0), root / "scaler" / "1")
    save_ir(nonfinite_model(), root / "nonfinite" / "1")
    (root / "empty").mkdir()  # no version: never available
    config = write_config(root / "config.json", [{"name": n, "base_path": n}
                                                 for n in ("scaler", "nonfinite", "empty")])
    grpc_port = free_port()
    yield server_factory(config, "--port", str(grpc_port)), grpc_port


def _rest_client() -> Any:
    return kserve.InferenceRESTClient(kserve.RESTConfig(protocol="v2"))


def test_kserve_rest_client_health_and_readiness(server: tuple[RunningServer, int]) -> None:
    rest, _ = server

    async def run() -> tuple[Any, ...]:
        client = _rest_client()
        try:
            return (await client.is_server_live(rest.url), await client.is_server_ready(rest.url),
                    await client.is_model_ready(rest.url, "scaler"),
                    await client.is_model_ready(rest.url, "empty"),
                    await client.is_model_ready(rest.url, "nope"))
        finally:
            await client.close()

    assert asyncio.run(run()) == (True, True, True, False, False)


def test_kserve_rest_client_infer_echoes_the_id(server: tuple[RunningServer, int]) -> None:
    rest, _ = server
    x = kserve.InferInput("x", [1, 4], "FP32")
    x.set_data_from_numpy(np.array([[1, 2, 3, 4]], np.float32))

    async def run() -> Any:
        client = _rest_client()
        try:
            return await client.infer(rest.url, kserve.InferRequest(
                "scaler", [x], request_id="req-7"), model_name="scaler")
        finally:
            await client.close()

    answer = asyncio.run(run())
    assert answer.id == "req-7"
    assert answer.outputs[0].as_numpy().tolist() == [[3.0, 6.0, 9.0, 12.0]]


def test_kserve_rest_client_reports_a_bad_id(server: tuple[RunningServer, int]) -> None:
    rest, _ = server

    async def run() -> Any:
        client = _rest_client()
        try:
            return await client.infer(rest.url, {"id": 7, "inputs": [
                {"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]},
                model_name="scaler")
        finally:
            await client.close()

    with pytest.raises(httpx.HTTPStatusError, match="400"):
        asyncio.run(run())


def test_kserve_grpc_client_health_readiness_and_infer(server: tuple[RunningServer, int]
                                                        ) -> None:
    _, grpc_port = server
    x = kserve.InferInput("x", [1, 4], "FP32")
    x.set_data_from_numpy(np.array([[1, 2, 3, 4]], np.float32))

    async def run() -> tuple[Any, ...]:
        client = kserve.InferenceGRPCClient(f"127.0.0.1:{grpc_port}", timeout=30, retries=2)
        try:
            answer = await client.infer(kserve.InferRequest("scaler", [x], request_id="g-1"))
            return (await client.is_server_live(), await client.is_server_ready(),
                    await client.is_model_ready("scaler"), answer)
        finally:
            await client.close()

    live, ready, model_ready, answer = asyncio.run(run())
    assert (live, ready, model_ready) == (True, True, True)
    assert answer.outputs[0].as_numpy().tolist() == [[3.0, 6.0, 9.0, 12.0]]


def _same(got: Any, want: list[float]) -> bool:
    """Equal as FP32 values, NaN where NaN is wanted."""
    values = np.asarray(got, np.float32).reshape(-1)
    expected = np.array(want, np.float32)
    return bool(np.array_equal(values, expected, equal_nan=True))


def test_tritonclient_reads_nonfinite_json_outputs_back(server: tuple[RunningServer, int]
                                                         ) -> None:
    rest, _ = server
    client = triton.InferenceServerClient(f"127.0.0.1:{rest.port}")
    x = triton.InferInput("x", [1, 4], "FP32")
    x.set_data_from_numpy(np.array(BIG_X, np.float32))
    outputs = [triton.InferRequestedOutput(n, binary_data=False) for n in ("big", "nan")]
    result = client.infer("nonfinite", [x], outputs=outputs)
    assert _same(result.as_numpy("big"), WANT_BIG) and _same(result.as_numpy("nan"), WANT_NAN)
    binary = client.infer("nonfinite", [x], outputs=[
        triton.InferRequestedOutput("big", binary_data=True)])
    assert _same(binary.as_numpy("big"), WANT_BIG)


def test_python_json_reads_tfs_nonfinite_outputs_back(server: tuple[RunningServer, int]
                                                       ) -> None:
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
def test_head_sends_the_get_head_without_a_body(server: tuple[RunningServer, int],
                                                path: str) -> None:
    rest, _ = server
    got = rest.get(path)
    raw = _raw(rest.port, f"HEAD {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
               .encode())
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
