"""/metrics with OVMS's exact names and labels, counted for REST and gRPC, success and
failure; JSON logs: one object per line, the request id on request lines, --log_level honoured,
never a byte of a payload."""

from __future__ import annotations

import json
import re
from pathlib import Path

import grpc
import numpy as np
import pytest

from core import metrics
from protos.gen.kserve import grpc_predict_v2_pb2 as kfs
from protos.gen.kserve import grpc_predict_v2_pb2_grpc
from protos.gen.tensorflow.core.framework import types_pb2
from protos.gen.tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
from tests.core.helpers import RunningServer
from tests.reliability.helpers import SCALER_X, metric_value, scrape

REQUIRED = (
    "ovms_requests_success",
    "ovms_requests_fail",
    "ovms_request_time_us",
    "ovms_inference_time_us",
    "ovms_wait_for_infer_req_time_us",
    "ovms_streams",
    "ovms_infer_req_queue_size",
    "ovms_infer_req_active",
    "ovms_current_requests",
    "ov_serverless_cold_start_seconds",
)
MARKER = "ZQXJ-PAYLOAD-MARKER-7731"


def _families(text: str) -> dict[str, str]:
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))


def test_exposition_uses_ovms_names(limited: RunningServer) -> None:
    limited.post("/v1/models/scaler:predict", {"instances": SCALER_X})
    limited.get("/v1/models/scaler")
    text = scrape(limited.url)
    families = _families(text)
    for name in REQUIRED:
        assert name in families, name
    assert families["ovms_requests_success"] == "counter"
    assert families["ovms_request_time_us"] == "histogram"
    assert "_total" not in text and "_created" not in text
    # status/ready carry no version label (OVMS docs/metrics_output.out)
    assert re.search(
        r'^ovms_requests_success\{api="TensorFlowServing",interface="REST",'
        r'method="GetModelStatus",name="scaler"\} ',
        text,
        re.M,
    ), text
    assert metric_value(text, "ovms_streams", name="scaler", version="1") >= 1
    assert metric_value(text, "ovms_infer_req_queue_size", name="scaler", version="1") >= 1
    assert (
        metric_value(
            text, "ov_serverless_cold_start_seconds", stage="compile_s", name="scaler", version="1"
        )
        > 0
    )
    assert metric_value(text, "ov_serverless_cold_start_seconds", stage="config_apply_s") > 0
    for line in text.splitlines():  # valid text format, every line
        assert line.startswith("#") or re.match(r"^[a-z_]+(\{.*\})? \S+$", line), line


# OVMS's docs/metrics.md label table; status/ready samples of the request counters carry no
# version (docs/metrics_output.out)
OVMS_LABELS = {
    "ovms_streams": {("name", "version")},
    "ovms_current_requests": {("name", "version")},
    "ovms_requests_success": {
        ("api", "interface", "method", "name", "version"),
        ("api", "interface", "method", "name"),
    },
    "ovms_requests_fail": {
        ("api", "interface", "method", "name", "version"),
        ("api", "interface", "method", "name"),
    },
    "ovms_request_time_us": {("interface", "name", "version")},
    "ovms_inference_time_us": {("name", "version")},
    "ovms_wait_for_infer_req_time_us": {("name", "version")},
    "ovms_infer_req_queue_size": {("name", "version")},
    "ovms_infer_req_active": {("name", "version")},
}


def _label_sets(text: str) -> dict[str, set[tuple[str, ...]]]:
    found: dict[str, set[tuple[str, ...]]] = {}
    for name, labels in re.findall(r"^(ovms_\w+?)(?:_bucket|_count|_sum)?\{(.*)\} ", text, re.M):
        keys = tuple(sorted(k for k in re.findall(r'(\w+)="', labels) if k != "le"))
        found.setdefault(name, set()).add(keys)
    return found


def test_every_ovms_family_has_ovms_labels(limited: RunningServer) -> None:
    limited.post("/v1/models/scaler:predict", {"instances": SCALER_X})
    limited.post(
        "/v2/models/scaler/infer",
        {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": SCALER_X[0]}]},
    )
    limited.get("/v1/models/scaler")
    limited.get("/v2/models/scaler/ready")
    limited.post("/v1/models/scaler:predict", {"instances": [[1, 2]]})
    found = _label_sets(scrape(limited.url))
    assert set(found) == set(OVMS_LABELS)
    for name, label_sets in found.items():
        assert label_sets <= OVMS_LABELS[name], name
    assert ("interface", "name", "version") in found["ovms_request_time_us"]


# OVMS's `le` values for every *_time_us histogram (docs/metrics_output.out)
OVMS_BUCKETS = [
    "10",
    "18",
    "32",
    "58",
    "104",
    "188",
    "340",
    "612",
    "1101",
    "1983",
    "3570",
    "6426",
    "11568",
    "20822",
    "37481",
    "67466",
    "121439",
    "218591",
    "393464",
    "708235",
    "1274823",
    "2294682",
    "4130428",
    "7434771",
    "13382588",
    "24088659",
    "43359586",
    "78047255",
    "140485060",
    "252873108",
    "455171596",
    "819308872",
    "1474755971",
    "+Inf",
]


@pytest.mark.parametrize(
    "family", ["ovms_request_time_us", "ovms_inference_time_us", "ovms_wait_for_infer_req_time_us"]
)
def test_time_histograms_have_ovms_buckets(limited: RunningServer, family: str) -> None:
    limited.post("/v1/models/scaler:predict", {"instances": SCALER_X})
    text = scrape(limited.url)
    sample = re.search(rf'^{family}_bucket\{{(.*?),le="[^"]+"\}} ', text, re.M)
    assert sample, text
    bounds = re.findall(rf'^{family}_bucket\{{{re.escape(sample[1])},le="([^"]+)"\}} ', text, re.M)
    assert bounds == OVMS_BUCKETS


def test_histogram_buckets_are_cumulative() -> None:
    registry: list[metrics.Family] = []
    histogram = metrics.Histogram("ovms_t", "t", ("name",), (10, 100), registry=registry)
    for value in (5, 10, 50, 500):
        histogram.labels("m").observe(value)
    assert metrics.render(registry).decode().splitlines()[2:] == [
        'ovms_t_bucket{name="m",le="10"} 2.0',
        'ovms_t_bucket{name="m",le="100"} 3.0',
        'ovms_t_bucket{name="m",le="+Inf"} 4.0',
        'ovms_t_count{name="m"} 4.0',
        'ovms_t_sum{name="m"} 565.0',
    ]


def test_render_escapes_label_values() -> None:
    registry: list[metrics.Family] = []
    counter = metrics.Counter("ovms_x", "help\nline", ("name", "version"), registry=registry)
    counter.labels('a"b\\c\nd', "").inc(2)
    assert metrics.render(registry).decode().splitlines() == [
        "# HELP ovms_x help\\nline",
        "# TYPE ovms_x counter",
        'ovms_x{name="a\\"b\\\\c\\nd"} 2.0',
    ]


REST = dict(interface="REST", name="scaler")


@pytest.mark.parametrize(
    "api,method,path,good,bad",
    [
        (
            "TensorFlowServing",
            "Predict",
            "/v1/models/scaler:predict",
            {"instances": SCALER_X},
            {"instances": [[1, 2]]},
        ),
        (
            "KServe",
            "ModelInfer",
            "/v2/models/scaler/infer",
            {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": SCALER_X[0]}]},
            {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "INT64", "data": [1, 2, 3, 4]}]},
        ),
    ],
)
def test_rest_counts(
    limited: RunningServer, api: str, method: str, path: str, good: object, bad: object
) -> None:
    labels = dict(api=api, method=method, version="1", **REST)
    before = scrape(limited.url)
    for _ in range(3):
        assert limited.post(path, good).status_code == 200
    for _ in range(2):
        assert limited.post(path, bad).status_code == 400
    after = scrape(limited.url)
    for name, delta in (("ovms_requests_success", 3), ("ovms_requests_fail", 2)):
        assert (
            metric_value(after, name, **labels) - metric_value(before, name, **labels) == delta
        ), name
    timed = dict(interface="REST", name="scaler", version="1")
    assert (
        metric_value(after, "ovms_request_time_us_count", **timed)
        - metric_value(before, "ovms_request_time_us_count", **timed)
        == 3
    )
    assert (
        metric_value(after, "ovms_inference_time_us_count", name="scaler", version="1")
        - metric_value(before, "ovms_inference_time_us_count", name="scaler", version="1")
        >= 3
    )


def test_grpc_counts(limited: RunningServer) -> None:
    tfs_good = predict_pb2.PredictRequest()
    tfs_good.model_spec.name = "scaler"
    tensor = tfs_good.inputs["x"]
    tensor.dtype = types_pb2.DT_FLOAT
    tensor.tensor_shape.dim.add(size=1)
    tensor.tensor_shape.dim.add(size=4)
    tensor.tensor_content = np.ones(4, np.float32).tobytes()
    tfs_bad = predict_pb2.PredictRequest()
    tfs_bad.CopyFrom(tfs_good)
    tfs_bad.inputs["x"].tensor_content = b"\0" * 8
    kfs_good = kfs.ModelInferRequest(model_name="scaler")
    kfs_good.inputs.add(name="x", datatype="FP32", shape=[1, 4])
    kfs_good.raw_input_contents.append(np.ones(4, np.float32).tobytes())
    kfs_bad = kfs.ModelInferRequest(model_name="scaler")
    kfs_bad.inputs.add(name="x", datatype="FP32", shape=[1, 4])
    kfs_bad.raw_input_contents.append(b"\0")
    before = scrape(limited.url)
    with grpc.insecure_channel(limited.grpc_target) as channel:  # type: ignore[attr-defined]
        tfs = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        kserve = grpc_predict_v2_pb2_grpc.GRPCInferenceServiceStub(channel)
        for good, bad in (
            (lambda: tfs.Predict(tfs_good, timeout=10), lambda: tfs.Predict(tfs_bad, timeout=10)),
            (
                lambda: kserve.ModelInfer(kfs_good, timeout=10),
                lambda: kserve.ModelInfer(kfs_bad, timeout=10),
            ),
        ):
            good()
            good()
            with pytest.raises(grpc.RpcError):
                bad()
    after = scrape(limited.url)
    for api, method in (("TensorFlowServing", "Predict"), ("KServe", "ModelInfer")):
        labels = dict(api=api, interface="gRPC", method=method, name="scaler", version="1")
        assert (
            metric_value(after, "ovms_requests_success", **labels)
            - metric_value(before, "ovms_requests_success", **labels)
            == 2
        ), api
        assert (
            metric_value(after, "ovms_requests_fail", **labels)
            - metric_value(before, "ovms_requests_fail", **labels)
            == 1
        ), api


def test_unknown_model_names_do_not_become_labels(limited: RunningServer) -> None:
    for i in range(5):
        limited.post(f"/v1/models/made-up-{i}:predict", {"instances": SCALER_X})
    assert "made-up-" not in scrape(limited.url)


def test_unknown_names_and_versions_on_any_route_do_not_become_labels(
    limited: RunningServer,
) -> None:
    """Every route a client can name a model or version on: a made-up one adds no series
    (a scraper probing names would grow /metrics without bound). KServe's REST ready route
    counted a made-up name as a success under its own label; every route labelled a
    made-up version number."""
    for path in (
        "/v2/models/made-up-ready/ready",
        "/v2/models/made-up-meta",
        "/v1/models/made-up-status",
        "/v1/models/made-up-tfsmeta/metadata",
        "/v2/models/scaler/versions/7771/ready",
        "/v2/models/scaler/versions/7772",
        "/v1/models/scaler/versions/7773/metadata",
        "/v1/models/scaler/versions/7774",
    ):
        assert limited.get(path).status_code == 404, path
    limited.post("/v1/models/scaler/versions/7775:predict", {"instances": SCALER_X})
    limited.post("/v1/models/made-up-v/versions/7776:predict", {"instances": SCALER_X})
    with grpc.insecure_channel(limited.grpc_target) as channel:  # type: ignore[attr-defined]
        kserve = grpc_predict_v2_pb2_grpc.GRPCInferenceServiceStub(channel)
        for call, request in (
            (kserve.ModelReady, kfs.ModelReadyRequest(name="made-up-grpc")),
            (kserve.ModelReady, kfs.ModelReadyRequest(name="scaler", version="7777")),
            (kserve.ModelMetadata, kfs.ModelMetadataRequest(name="scaler", version="7778")),
        ):
            with pytest.raises(grpc.RpcError) as caught:
                call(request, timeout=10)
            assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    text = scrape(limited.url)
    assert "made-up" not in text
    assert not re.search(r'version="777\d"', text), text
    # each was counted as a failure, nowhere as a success
    ready = dict(api="KServe", interface="REST", method="ModelReady")
    assert metric_value(text, "ovms_requests_fail", **ready, name="") >= 1
    assert metric_value(text, "ovms_requests_success", **ready, name="") == 0
    assert metric_value(text, "ovms_requests_fail", **ready, name="scaler") >= 1


# -- logs --------------------------------------------------------------------------------------


def _json_lines(server: RunningServer) -> list[dict[str, object]]:
    server._log.flush()
    text = server.log_path.read_text(errors="replace")
    docs = []
    for line in text.splitlines():
        if line.startswith(("ov-serverless REST listening", "  curl ")):
            continue  # the human-readable banner of `serve`
        docs.append(json.loads(line))  # every other line is one JSON object
    return docs


def test_logs_are_json_with_request_id_and_no_payload(limited: RunningServer) -> None:
    good = {"instances": SCALER_X, "signature_name": MARKER}
    assert (
        limited.post(
            "/v1/models/scaler:predict", good, headers={"x-request-id": "rid-good-1"}
        ).status_code
        == 200
    )
    for body in (
        f'{{"instances": [[1, 2]], "x": "{MARKER}"}}',
        f"not json {MARKER}",
        json.dumps(
            {"inputs": [{"name": MARKER, "shape": [1], "datatype": "BYTES", "data": [MARKER]}]}
        ),
    ):
        for path in (
            "/v1/models/scaler:predict",
            "/v2/models/scaler/infer",
            "/v1/models/classifier_nhwc:predict",
        ):
            response = limited.post(path, data=body, headers={"x-request-id": "rid-bad-2"})
            assert 400 <= response.status_code < 500
    docs = _json_lines(limited)
    requests_ = [d for d in docs if d.get("message") == "request"]
    by_id = {d.get("request_id") for d in requests_}
    assert {"rid-good-1", "rid-bad-2"} <= by_id
    good_line = next(d for d in requests_ if d.get("request_id") == "rid-good-1")
    assert good_line["status"] == 200 and good_line["path"] == "/v1/models/scaler:predict"
    assert {"time", "level", "logger"} <= set(good_line)
    assert MARKER not in limited.log_path.read_text(errors="replace")


def test_log_level_is_honoured(rel_repo: Path, tmp_path: Path) -> None:
    server = RunningServer(rel_repo / "config.json", tmp_path, ("--log_level", "WARNING"))
    try:
        server.post("/v1/models/scaler:predict", {"instances": SCALER_X})
        server.post("/v1/models/scaler:predict", data="nope")
        docs = _json_lines(server)
    finally:
        server.stop()
    assert docs == [] or all(d["level"] in ("WARNING", "ERROR", "CRITICAL") for d in docs), docs


def test_log_path_gets_the_same_json_lines_and_a_bad_one_is_a_usage_error(
    rel_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from handlers import cli

    log_file = tmp_path / "ovms.log"
    args = [
        "invoke",
        "POST",
        "/v1/models/scaler:predict",
        "--config_path",
        str(rel_repo / "config.json"),
        "--cache_dir",
        str(tmp_path / "cache"),
        "--data",
        json.dumps({"instances": SCALER_X}),
        "--log_level",
        "DEBUG",
    ]
    assert cli.main([*args, "--log_path", str(log_file)]) == 0
    lines = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert any(d["message"] == "request" and d["status"] == 200 for d in lines), lines
    assert '"message":"request"' in capsys.readouterr().err  # stderr keeps the lines too
    assert cli.main([*args, "--log_path", str(tmp_path / "missing" / "x.log")]) == 64
    assert capsys.readouterr().err.startswith(
        f"ov-serverless: cannot open log_path {tmp_path / 'missing' / 'x.log'}: "
    )
