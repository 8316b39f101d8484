"""Operating the gRPC server: health, reflection, error codes, message limit, queueing, SIGTERM."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from protos.gen.kserve import grpc_predict_v2_pb2 as kfs
from protos.gen.kserve import grpc_predict_v2_pb2_grpc
from protos.gen.tensorflow.core.framework import tensor_pb2, types_pb2
from protos.gen.tensorflow_serving.apis import (
    get_model_metadata_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)
from tests.handlers.grpc_server.conftest import SMALL_LIMIT
from tests.handlers.grpc_server.helpers import Server

SERVICES = {
    "tensorflow.serving.PredictionService",
    "tensorflow.serving.ModelService",
    "inference.GRPCInferenceService",
    "grpc.health.v1.Health",
}


def _health(channel: grpc.Channel, service: str) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status


def test_health_overall_and_per_model(channel: grpc.Channel) -> None:
    serving, not_serving = (
        health_pb2.HealthCheckResponse.SERVING,
        health_pb2.HealthCheckResponse.NOT_SERVING,
    )
    assert _health(channel, "") == serving
    assert _health(channel, "classifier") == serving
    assert _health(channel, "scaler") == serving
    assert _health(channel, "empty") == not_serving  # no version available
    with pytest.raises(grpc.RpcError) as caught:
        _health(channel, "missing")
    assert caught.value.code() is grpc.StatusCode.NOT_FOUND


def test_reflection_lists_and_describes_services(channel: grpc.Channel) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    reply = next(iter(stub.ServerReflectionInfo(iter([request]), timeout=5)))
    names = {service.name for service in reply.list_services_response.service}
    assert names >= SERVICES
    described = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
    for name in SERVICES:
        assert described.FindServiceByName(name).methods
    predict = described.FindMethodByName("tensorflow.serving.PredictionService.Predict")
    assert (
        predict.input_type.fields_by_name["inputs"]
        .message_type.fields_by_name["value"]
        .message_type.full_name
        == "tensorflow.TensorProto"
    )


def _scaler_request(
    model: str = "scaler", version: int = 0, shape: tuple[int, ...] = (1, 4)
) -> predict_pb2.PredictRequest:
    x = np.ones(shape, np.float32)
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    if version:
        request.model_spec.version.value = version
    proto = request.inputs["x"]
    proto.dtype = types_pb2.DT_FLOAT
    for size in shape:
        proto.tensor_shape.dim.add(size=size)
    proto.tensor_content = x.tobytes()
    return request


def _code(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value.code(), str(caught.value.details())


def test_errors_then_a_good_call(channel: grpc.Channel) -> None:
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    kserve = grpc_predict_v2_pb2_grpc.GRPCInferenceServiceStub(channel)
    bad_values = _scaler_request()
    bad_values.inputs["x"].tensor_content = b"\0" * 12
    wrong_count = _scaler_request()
    wrong_count.inputs["x"].ClearField("tensor_content")
    wrong_count.inputs["x"].float_val.extend([1.0, 2.0])
    metadata = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["inputs"])
    metadata.model_spec.name = "scaler"
    renamed = predict_pb2.PredictRequest()
    renamed.CopyFrom(_scaler_request())
    renamed.inputs["z"].CopyFrom(renamed.inputs.pop("x"))
    kserve_bad = kfs.ModelInferRequest(model_name="scaler", model_version="x1")
    cases: list[tuple[Callable[[], object], grpc.StatusCode, str]] = [
        (
            lambda: stub.Predict(_scaler_request("missing"), timeout=5),
            grpc.StatusCode.NOT_FOUND,
            "name: missing",
        ),
        (
            lambda: stub.Predict(_scaler_request(version=9), timeout=5),
            grpc.StatusCode.NOT_FOUND,
            "version: 9",
        ),
        (
            lambda: stub.Predict(_scaler_request(shape=(1, 5)), timeout=5),
            grpc.StatusCode.INVALID_ARGUMENT,
            "input name: x",
        ),
        (
            lambda: stub.Predict(bad_values, timeout=5),
            grpc.StatusCode.INVALID_ARGUMENT,
            "Expected: 16 bytes; Actual: 12 bytes; input name: x",
        ),
        (
            lambda: stub.Predict(wrong_count, timeout=5),
            grpc.StatusCode.INVALID_ARGUMENT,
            "Expected: 4; Actual: 2; input name: x",
        ),
        (
            lambda: stub.Predict(renamed, timeout=5),
            grpc.StatusCode.INVALID_ARGUMENT,
            "Required input: x",
        ),
        (
            lambda: stub.GetModelMetadata(metadata, timeout=5),
            grpc.StatusCode.INVALID_ARGUMENT,
            "Invalid signature name",
        ),
        (
            lambda: stub.Predict(_scaler_request("empty"), timeout=5),
            grpc.StatusCode.UNAVAILABLE,
            "empty",
        ),
        (
            lambda: kserve.ModelInfer(kserve_bad, timeout=5),
            grpc.StatusCode.INVALID_ARGUMENT,
            "invalid format",
        ),
    ]
    for call, code, text in cases:
        got_code, details = _code(call)
        assert (got_code, text in details) == (code, True), details
        good = stub.Predict(_scaler_request(), timeout=5)
        assert np.allclose(np.frombuffer(good.outputs["y"].tensor_content, np.float32), 3.0)


def test_grpc_calls_counted_in_metrics(channel: grpc.Channel, server: Server) -> None:
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    stub.Predict(_scaler_request(version=1), timeout=5)
    text = requests.get(f"http://127.0.0.1:{server.rest_port}/metrics", timeout=5).text
    assert (
        'ovms_requests_success{api="TensorFlowServing",interface="gRPC",'
        'method="Predict",name="scaler",version="1"}'
    ) in text


def test_oversized_message_resource_exhausted(small_server: Server) -> None:
    with grpc.insecure_channel(small_server.target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        big = _scaler_request(shape=(SMALL_LIMIT // 16 + 1, 4))  # > 1 MiB of tensor_content
        code, details = _code(lambda: stub.Predict(big, timeout=10))
        assert code is grpc.StatusCode.RESOURCE_EXHAUSTED, details
        good = stub.Predict(_scaler_request(shape=(1000, 4)), timeout=10)
        assert len(good.outputs["y"].tensor_content) == 16000


def test_requests_beyond_workers_queue(small_server: Server) -> None:
    """8 clients x 12 calls against --grpc_workers 2: every call succeeds (queued, not shed)."""
    with grpc.insecure_channel(small_server.target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        request = _slow_request(1)

        def client(_: int) -> int:
            return sum(
                len(stub.Predict(request, timeout=60).outputs["y"].tensor_content) == 4
                for _ in range(12)
            )

        with futures.ThreadPoolExecutor(8) as pool:
            assert list(pool.map(client, range(8))) == [12] * 8


def test_grpc_max_threads_runs_one_call_at_a_time(repo: Path, tmp_path: Path) -> None:
    """--grpc_max_threads 1: four calls at once take at least four single calls (on more
    threads the model's two streams would run them two at a time). The THROUGHPUT hint keeps
    one compile: adaptive execution would compile a second variant in the background while
    the single calls are timed."""
    config = tmp_path / "config.json"
    entry = {"name": "slow", "base_path": str(repo / "slow")}
    entry["plugin_config"] = {"PERFORMANCE_HINT": "THROUGHPUT"}
    config.write_text(json.dumps({"model_config_list": [{"config": entry}]}))
    server = Server.start(config, tmp_path, "--grpc_max_threads", "1", rest=False)
    try:
        with grpc.insecure_channel(server.target) as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            request = _slow_request(4)
            stub.Predict(request, timeout=60)  # warm-up
            single = min(_timed(lambda: stub.Predict(request, timeout=60)) for _ in range(3))
            burst = _timed(
                lambda: [
                    call.result()
                    for call in [stub.Predict.future(request, timeout=60) for _ in range(4)]
                ]
            )
            assert burst >= 3.2 * single, (burst, single)
    finally:
        server.stop()


def _timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def _slow_request(batch: int) -> predict_pb2.PredictRequest:
    x = np.random.default_rng(0).random((batch, 256, 256), dtype=np.float32)
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "slow"
    proto: tensor_pb2.TensorProto = request.inputs["x"]
    proto.dtype = types_pb2.DT_FLOAT
    for size in x.shape:
        proto.tensor_shape.dim.add(size=size)
    proto.tensor_content = x.tobytes()
    return request


def test_sigterm_drains_in_flight_calls(repo: Path, tmp_path: Path) -> None:
    """10 calls of ~0.3 s each on 2 workers, some still queued; SIGTERM; all 10 answer, exit
    code 0."""
    grace = 15.0
    server = Server.start(
        repo / "config.json",
        tmp_path,
        "--grpc_workers",
        "2",
        "--shutdown_grace_seconds",
        str(grace),
        rest=False,
    )
    try:
        with grpc.insecure_channel(server.target) as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            probe = _slow_request(8)
            stub.Predict(probe, timeout=60)  # warm-up
            took = []
            for _ in range(3):  # the fastest of 3: one slow spell must not shrink the calls
                started = time.perf_counter()
                stub.Predict(probe, timeout=60)
                took.append(time.perf_counter() - started)
            batch = int(min(256, max(1, 8 * 0.3 / min(took))))
            request = _slow_request(batch)
            burst = [stub.Predict.future(request, timeout=60) for _ in range(10)]
            # the burst reached the server and its handler thread took every call (one that
            # it has not taken when the shutdown starts is cancelled): 2 running, some done,
            # the rest queued (10 x 0.3 s on 2 workers)
            time.sleep(0.5)
            assert not all(call.done() for call in burst)
            signalled = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            results = [call.result() for call in burst]
            assert all(len(r.outputs["y"].tensor_content) == 4 * batch for r in results)
            assert server.proc.wait(timeout=grace + 10) == 0
            assert time.monotonic() - signalled < grace + 5
            code, _ = _code(lambda: stub.Predict(request, timeout=2))
            assert code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    finally:
        server.stop()


def test_port_in_use_is_an_error(small_server: Server, repo: Path, tmp_path: Path) -> None:
    """SO_REUSEPORT is off: a second server on a taken port exits 1 instead of sharing it."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "handlers.cli",
            "serve",
            "--config_path",
            str(repo / "config.json"),
            "--port",
            str(small_server.port),
            "--rest_port",
            "0",
            "--grpc_bind_address",
            "127.0.0.1",
            "--cache_dir",
            str(tmp_path),
            "--log_level",
            "ERROR",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "could not bind" in proc.stderr


def test_grpc_only_mode_serves_metrics_on_its_own_port(repo: Path, tmp_path: Path) -> None:
    """--rest_port 0 has no REST /metrics: --metrics_port serves Prometheus text instead."""
    from tests.handlers.grpc_server.helpers import free_port

    metrics_port = free_port()
    running = Server.start(
        repo / "config.json", tmp_path, "--metrics_port", str(metrics_port), rest=False
    )
    try:
        with grpc.insecure_channel(running.target) as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            stub.Predict(_scaler_request(version=1), timeout=5)
        base = f"http://127.0.0.1:{metrics_port}"
        text = requests.get(base + "/metrics", timeout=5).text
        assert (
            'ovms_requests_success{api="TensorFlowServing",interface="gRPC",'
            'method="Predict",name="scaler",version="1"}'
        ) in text
        assert requests.get(base + "/v1/config", timeout=5).status_code == 404
    finally:
        running.stop()


def test_grpc_only_mode_takes_ovms_channel_arguments_and_metrics_list(
    repo: Path, tmp_path: Path
) -> None:
    """--grpc_channel_arguments reach the server (over our own message limit), and the
    metrics port serves only the --metrics_list families."""
    from tests.handlers.grpc_server.helpers import free_port

    metrics_port = free_port()
    running = Server.start(
        repo / "config.json",
        tmp_path,
        "--metrics_port",
        str(metrics_port),
        "--grpc_channel_arguments",
        "grpc.max_receive_message_length=4096, grpc.keepalive_time_ms=60000",
        "--metrics_enable",
        "--metrics_list",
        "ovms_requests_fail",
        rest=False,
    )
    try:
        with grpc.insecure_channel(running.target) as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            good = stub.Predict(_scaler_request(shape=(100, 4)), timeout=5)  # 1.6 KB
            assert len(good.outputs["y"].tensor_content) == 1600
            code, _ = _code(lambda: stub.Predict(_scaler_request(shape=(1000, 4)), timeout=5))
            assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
        text = requests.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
        assert re.findall(r"^# TYPE (\S+) ", text, re.M) == ["ovms_requests_fail"]
    finally:
        running.stop()


def _peak_rss_kib(server: Server) -> int:
    """The server process's peak resident memory so far (Linux VmHWM)."""
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1))  # type: ignore[union-attr]


def test_image_batch_over_the_tensor_limit_is_refused_before_decoding(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, png_1x1: bytes
) -> None:
    """400 one-pixel pngs (~28 KB) would decode to 400 224x224x3 float images (240 MB):
    over an 8 MiB tensor limit, the call is refused before the images are decoded (the peak
    memory barely moves), and the model keeps serving."""
    monkeypatch.setenv("OVS_MAX_TENSOR_BYTES", str(8 << 20))
    config = tmp_path / "config.json"
    entry = {"name": "classifier", "base_path": str(repo / "classifier")}
    config.write_text(json.dumps({"model_config_list": [{"config": entry}]}))
    server = Server.start(config, tmp_path, rest=False)

    def images(count: int) -> predict_pb2.PredictRequest:
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "classifier"
        proto = request.inputs["input"]
        proto.dtype = types_pb2.DT_STRING
        proto.tensor_shape.dim.add(size=count)
        proto.string_val.extend([png_1x1] * count)
        return request

    try:
        with grpc.insecure_channel(server.target) as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            stub.Predict(images(2), timeout=60)  # warm: Pillow imported, buffers allocated
            before = _peak_rss_kib(server)
            code, details = _code(lambda: stub.Predict(images(400), timeout=60))
            assert code is grpc.StatusCode.INVALID_ARGUMENT, details
            assert "exceeds the limit of 8388608 bytes" in details
            assert _peak_rss_kib(server) - before < 100 * 1024
            reply = stub.Predict(images(13), timeout=60)  # 13 x 602112 bytes: within 8 MiB
            assert [d.size for d in reply.outputs["probabilities"].tensor_shape.dim] == [13, 1000]
    finally:
        server.stop()


@pytest.fixture
def png_1x1() -> bytes:
    from io import BytesIO

    from PIL import Image

    buffer = BytesIO()
    Image.new("RGB", (1, 1), (10, 20, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_reload_of_a_broken_config_names_no_server_path(repo: Path, tmp_path: Path) -> None:
    """HandleReloadConfigRequest on a config that is no longer JSON, then gone: INVALID_ARGUMENT
    naming config.json relative to its folder (the server's absolute paths stay in its log),
    and the loaded model keeps serving."""
    config = tmp_path / "config.json"
    entry = {"name": "scaler", "base_path": str(repo / "scaler")}
    config.write_text(json.dumps({"model_config_list": [{"config": entry}]}))
    server = Server.start(config, tmp_path, rest=False)
    try:
        with grpc.insecure_channel(server.target) as channel:
            models = model_service_pb2_grpc.ModelServiceStub(channel)
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            reload = model_management_pb2.ReloadConfigRequest()
            for broken in ("{not json", None):
                if broken is None:
                    config.unlink()
                else:
                    config.write_text(broken)
                code, details = _code(lambda: models.HandleReloadConfigRequest(reload, timeout=30))
                assert code is grpc.StatusCode.INVALID_ARGUMENT, details
                assert "config.json" in details and str(tmp_path) not in details, details
                assert str(tmp_path.resolve()) not in details, details
                good = stub.Predict(_scaler_request(), timeout=10)
                assert np.allclose(np.frombuffer(good.outputs["y"].tensor_content, np.float32), 3.0)
    finally:
        server.stop()


@pytest.mark.parametrize(
    "method",
    [
        "/tensorflow.serving.PredictionService/Predict",
        "/tensorflow.serving.ModelService/GetModelStatus",
        "/inference.GRPCInferenceService/ModelInfer",
        "/grpc.health.v1.Health/Check",
    ],
)
@pytest.mark.parametrize(
    "raw",
    [b"\xff\xff\xff\xff", b"\x0a\x04\x0a\x02\xff\xfe", b"\x0a\x05\x0a\x02"],
    ids=["garbage", "name-not-utf8", "truncated"],
)
def test_a_request_that_is_no_protobuf_message_is_invalid_argument(
    channel: grpc.Channel, server: Server, method: str, raw: bytes
) -> None:
    """Bytes that do not parse as the method's message (garbage, a string field that is not
    UTF-8, a cut message) are the client's mistake: INVALID_ARGUMENT, not grpc's INTERNAL
    "Exception deserializing request!", and no ERROR traceback in the server's log."""
    logged = len(server.log.read_text())
    call = channel.unary_unary(
        method, request_serializer=lambda b: b, response_deserializer=lambda b: b
    )
    code, details = _code(lambda: call(raw, timeout=10))
    assert code is grpc.StatusCode.INVALID_ARGUMENT, details
    assert method in details
    assert "Traceback" not in server.log.read_text()[logged:]
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    good = stub.Predict(_scaler_request(), timeout=10)
    assert np.allclose(np.frombuffer(good.outputs["y"].tensor_content, np.float32), 3.0)
