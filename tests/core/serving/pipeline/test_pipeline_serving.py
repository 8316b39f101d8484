"""Pipelines served like models: numbers equal the steps run by hand with OpenVINO, over TFS
REST, KServe REST and both gRPC APIs; demultiplexing, gather, metadata, status, errors."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from core.api import App
from core.codecs import tfs_grpc
from examples.detect_classify import crop_node
from protos.gen.kserve import grpc_predict_v2_pb2 as kpb
from protos.gen.kserve import grpc_predict_v2_pb2_grpc as kgrpc
from protos.gen.tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)
from tests.core.serving.pipeline.conftest import Repo
from tests.core.serving.pipeline.helpers import (
    call,
    compiled,
    doc,
    error,
    grpc_channel,
    kserve_body,
    kserve_outputs,
    run,
    tfs_columns,
)
from tests.reliability.helpers import metric_value

X = np.random.default_rng(3).normal(0, 1, (2, 4)).astype(np.float32)


def chain_by_hand(repo: Repo, x: np.ndarray) -> dict[str, np.ndarray]:
    y = run(compiled(repo.xml("scaler")), x=x)["y"]
    pair = run(compiled(repo.xml("two_inputs")), a=y + np.float32(0.5), b=y)
    return {"sum": pair["sum"], "product": pair["product"], "scaled": y}


def grpc_predict(channel: grpc.Channel, name: str, **inputs: np.ndarray) -> dict[str, np.ndarray]:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = name
    for key, value in inputs.items():
        tfs_grpc.fill_proto(value, request.inputs[key])
    reply = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request)
    return {k: tfs_grpc.to_numpy(v, k) for k, v in reply.outputs.items()}


def kserve_grpc_infer(
    channel: grpc.Channel, name: str, **inputs: np.ndarray
) -> dict[str, np.ndarray]:
    from core.tensors import dtypes

    request = kpb.ModelInferRequest(model_name=name)
    for key, value in inputs.items():
        request.inputs.add(
            name=key, datatype=dtypes.from_numpy(value.dtype).kserve, shape=value.shape
        )
        request.raw_input_contents.append(value.tobytes())
    reply = kgrpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    return {
        o.name: np.frombuffer(raw, dtype=dtypes.from_kserve(o.datatype).numpy).reshape(o.shape)
        for o, raw in zip(reply.outputs, reply.raw_output_contents, strict=True)
    }


def assert_same(got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert set(got) == set(expected)
    for key, value in expected.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-5, atol=1e-6, err_msg=key)
        assert got[key].shape == value.shape, key


def test_two_models_and_a_custom_node_match_the_steps_by_hand(app: App, repo: Repo) -> None:
    expected = chain_by_hand(repo, X)
    tfs = tfs_columns(
        doc(call(app, "POST", "/v1/models/chain:predict", {"inputs": {"x": X.tolist()}}))
    )
    assert_same(tfs, expected)
    kserve = kserve_outputs(doc(call(app, "POST", "/v2/models/chain/infer", kserve_body(x=X))))
    assert_same(kserve, expected)
    with grpc_channel(app.manager) as channel:
        assert_same(grpc_predict(channel, "chain", x=X), expected)
        assert_same(kserve_grpc_infer(channel, "chain", x=X), expected)


def test_a_pipeline_ignores_the_requested_version(app: App, repo: Repo) -> None:
    answer = doc(
        call(app, "POST", "/v1/models/chain/versions/7:predict", {"inputs": {"x": X.tolist()}})
    )
    assert_same(tfs_columns(answer), chain_by_hand(repo, X))


def _image(bright: list[int]) -> np.ndarray:
    """1x3x224x224 with the listed quadrants (0 TL, 1 TR, 2 BL, 3 BR) bright, others dark."""
    rng = np.random.default_rng(sum(bright) + 1)
    image = rng.uniform(0, 60, (1, 3, 224, 224)).astype(np.float32)
    for index in bright:
        top, left = 112 * (index // 2), 112 * (index % 2)
        image[:, :, top : top + 112, left : left + 112] += 180
    return image


def test_demultiplexed_crops_match_classifying_each_crop_alone(app: App, repo: Repo) -> None:
    image = _image([1, 2, 3])
    scores = run(compiled(repo.xml("detector")), image=image)["scores"]
    crops = crop_node.execute({"image": image, "scores": scores}, {}, {"threshold": 0.5})
    classifier = compiled(repo.xml("classifier"))
    each = np.stack([run(classifier, input=crop)["probabilities"] for crop in crops["crops"]])
    assert each.shape == (3, 1, 1000)
    expected = {"probabilities": each, "boxes": crops["boxes"]}
    got = tfs_columns(
        doc(
            call(
                app,
                "POST",
                "/v1/models/detect_classify:predict",
                {"inputs": {"image": image.tolist()}},
            )
        )
    )
    assert_same(got, expected)
    assert got["boxes"].tolist() == [[112, 0, 224, 112], [0, 112, 112, 224], [112, 112, 224, 224]]
    kserve = kserve_outputs(
        doc(call(app, "POST", "/v2/models/detect_classify/infer", kserve_body(image=image)))
    )
    assert_same(kserve, expected)
    with grpc_channel(app.manager) as channel:
        assert_same(grpc_predict(channel, "detect_classify", image=image), expected)


def test_dynamic_demultiplexer_with_no_items_is_204_and_grpc_aborted(app: App) -> None:
    dark = _image([])
    reply = call(
        app, "POST", "/v1/models/detect_classify:predict", {"inputs": {"image": dark.tolist()}}
    )
    assert reply.status == 204
    reply = call(app, "POST", "/v2/models/detect_classify/infer", kserve_body(image=dark))
    assert reply.status == 204
    with grpc_channel(app.manager) as channel:
        for send in (grpc_predict, kserve_grpc_infer):
            with pytest.raises(grpc.RpcError) as caught:
                send(channel, "detect_classify", image=dark)
            assert caught.value.code() is grpc.StatusCode.ABORTED
            assert "demultiplexer produced no results" in caught.value.details()


def test_gather_from_node_collects_the_demultiplexed_items(app: App, repo: Repo) -> None:
    x = X[:1]
    scaler = compiled(repo.xml("scaler"))
    each = np.stack([run(scaler, x=x * k)["y"] for k in (1, 2, 3)])
    expected = {"each": each, "total": each.sum(axis=0), "count": np.array([3], dtype=np.int32)}
    got = tfs_columns(
        doc(call(app, "POST", "/v1/models/fanout:predict", {"inputs": {"x": x.tolist()}}))
    )
    assert_same(got, expected)
    kserve = kserve_outputs(doc(call(app, "POST", "/v2/models/fanout/infer", kserve_body(x=x))))
    assert_same(kserve, expected)


def test_metadata_tfs_and_kserve(app: App) -> None:
    meta = doc(call(app, "GET", "/v1/models/detect_classify/metadata"))
    assert meta["modelSpec"] == {"name": "detect_classify", "signatureName": "", "version": "1"}
    signature = meta["metadata"]["signature_def"]["signatureDef"]["serving_default"]
    assert signature["inputs"]["image"]["dtype"] == "DT_FLOAT"
    assert [d["size"] for d in signature["inputs"]["image"]["tensorShape"]["dim"]] == [
        "1",
        "3",
        "224",
        "224",
    ]
    assert [d["size"] for d in signature["outputs"]["probabilities"]["tensorShape"]["dim"]] == [
        "-1",
        "1",
        "1000",
    ]
    assert signature["outputs"]["boxes"]["dtype"] == "DT_INT32"
    kserve = doc(call(app, "GET", "/v2/models/detect_classify"))
    assert kserve["name"] == "detect_classify"
    assert kserve["versions"] == ["1"]
    assert kserve["inputs"] == [{"name": "image", "datatype": "FP32", "shape": [1, 3, 224, 224]}]
    assert kserve["outputs"] == [  # by name, as OVMS lists a pipeline's outputs
        {"name": "boxes", "datatype": "INT32", "shape": [-1, 4]},
        {"name": "probabilities", "datatype": "FP32", "shape": [-1, 1, 1000]},
    ]
    chain = doc(call(app, "GET", "/v2/models/chain"))
    assert {o["name"]: o["shape"] for o in chain["outputs"]} == {
        "sum": [-1, 4],
        "product": [-1, 4],
        "scaled": [-1, 4],
    }
    with grpc_channel(app.manager) as channel:
        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        request.model_spec.name = "detect_classify"
        reply = prediction_service_pb2_grpc.PredictionServiceStub(channel).GetModelMetadata(request)
        assert reply.model_spec.version.value == 1
        inputs = reply.metadata["signature_def"]
        assert b"probabilities" in inputs.value and b"boxes" in inputs.value
        kserve_stub = kgrpc.GRPCInferenceServiceStub(channel)
        ready = kserve_stub.ModelReady(kpb.ModelReadyRequest(name="detect_classify"))
        assert ready.ready
        meta = kserve_stub.ModelMetadata(kpb.ModelMetadataRequest(name="detect_classify"))
        assert list(meta.versions) == ["1"]
        assert [(t.name, t.datatype, list(t.shape)) for t in meta.outputs] == [
            ("boxes", "INT32", [-1, 4]),
            ("probabilities", "FP32", [-1, 1, 1000]),
        ]
        status_request = get_model_status_pb2.GetModelStatusRequest()
        status_request.model_spec.name = "detect_classify"
        status = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(status_request)
        assert [(s.version, s.state) for s in status.model_version_status] == [(1, 30)]


def test_status_is_version_1_available(app: App) -> None:
    status = doc(call(app, "GET", "/v1/models/chain"))
    assert status == {
        "model_version_status": [
            {
                "version": "1",
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": "OK"},
            }
        ]
    }
    assert call(app, "GET", "/v2/models/chain/ready").status == 200
    assert "chain" in doc(call(app, "GET", "/v1/config"))


def test_a_custom_node_that_raises_is_500_with_its_name_and_the_server_keeps_serving(
    app: App, repo: Repo
) -> None:
    bad = -np.abs(X)
    reply = call(app, "POST", "/v1/models/boom:predict", {"inputs": {"x": bad.tolist()}})
    assert reply.status == 500
    assert "Custom node shift failed: ValueError: negative input" in error(reply)
    good = np.abs(X)
    answer = tfs_columns(
        doc(call(app, "POST", "/v1/models/boom:predict", {"inputs": {"x": good.tolist()}}))
    )
    y = run(compiled(repo.xml("scaler")), x=good)["y"]
    np.testing.assert_allclose(answer["sum"], 2 * y, rtol=1e-6)
    with grpc_channel(app.manager) as channel:
        with pytest.raises(grpc.RpcError) as caught:
            grpc_predict(channel, "boom", x=bad)
        assert caught.value.code() is grpc.StatusCode.INTERNAL
        assert "Custom node shift failed" in caught.value.details()


def test_wrong_inputs_are_400_as_for_a_model(app: App) -> None:
    reply = call(app, "POST", "/v1/models/chain:predict", {"inputs": {"y": X.tolist()}})
    assert reply.status == 400
    reply = call(
        app, "POST", "/v1/models/chain:predict", {"inputs": {"x": np.zeros((2, 5)).tolist()}}
    )
    assert reply.status == 400
    assert "input name: x" in error(reply)


def test_metrics_count_pipeline_requests_under_the_pipeline_name(app: App) -> None:
    def scrape() -> str:
        reply = call(app, "GET", "/metrics")
        assert reply.status == 200
        return reply.body.decode()

    def count(text: str, metric: str, **labels: str) -> float:
        return metric_value(text, metric, name="fanout", version="1", **labels)

    before = scrape()
    body = {"inputs": {"x": X[:1].tolist()}}
    for _ in range(2):
        doc(call(app, "POST", "/v1/models/fanout:predict", body))
    doc(call(app, "POST", "/v2/models/fanout/infer", kserve_body(x=X[:1])))
    assert call(app, "POST", "/v1/models/fanout:predict", {"inputs": {"x": [[1, 2]]}}).status == 400
    with grpc_channel(app.manager) as channel:
        grpc_predict(channel, "fanout", x=X[:1])
    after = scrape()
    for labels, added in [
        ({"api": "TensorFlowServing", "interface": "REST", "method": "Predict"}, 2),
        ({"api": "KServe", "interface": "REST", "method": "ModelInfer"}, 1),
        ({"api": "TensorFlowServing", "interface": "gRPC", "method": "Predict"}, 1),
    ]:
        assert (
            count(after, "ovms_requests_success", **labels)
            - count(before, "ovms_requests_success", **labels)
            == added
        ), labels
    fail = {"api": "TensorFlowServing", "interface": "REST", "method": "Predict"}
    assert (
        count(after, "ovms_requests_fail", **fail) - count(before, "ovms_requests_fail", **fail)
        == 1
    )
    assert (
        count(after, "ovms_inference_time_us_count") - count(before, "ovms_inference_time_us_count")
        == 4
    )
    # OVMS times REST requests of both APIs in one sample (no api label)
    assert (
        count(after, "ovms_request_time_us_count", interface="REST")
        - count(before, "ovms_request_time_us_count", interface="REST")
        == 3
    )
