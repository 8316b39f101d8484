"""Stateful models as OVMS serves them: per-sequence state over TFS REST, KServe REST and both
gRPC APIs; START/END, server-assigned ids, and the OVMS sequence errors and status codes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from core.api import App
from core.codecs import tfs_grpc
from core.config import Settings
from core.runtime.blobs import export_manager
from core.serving.registry import ModelManager
from protos.gen.kserve import grpc_predict_v2_pb2 as kpb
from protos.gen.kserve import grpc_predict_v2_pb2_grpc as kgrpc
from protos.gen.tensorflow.core.framework import types_pb2
from protos.gen.tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
from tests.core.serving.pipeline.helpers import call, doc, error, grpc_channel, tfs_columns
from tests.core.serving.stateful.conftest import Repo, tfs_body

START, END = 1, 2


def tfs(
    app: App, model: str, x: list[float], sequence_id: int | None = None, control: int | None = None
) -> tuple[list[float], int]:
    answer = tfs_columns(
        doc(call(app, "POST", f"/v1/models/{model}:predict", tfs_body(x, sequence_id, control)))
    )
    assert answer["sequence_id"].shape == (1,)
    return answer["sum"][0].tolist(), int(answer["sequence_id"][0])


def test_running_sum_per_sequence_over_tfs_rest(app: App) -> None:
    assert tfs(app, "acc", [1, 2, 3, 4], 101, START) == ([1, 2, 3, 4], 101)
    assert tfs(app, "acc", [1, 1, 1, 1], 101) == ([2, 3, 4, 5], 101)
    assert tfs(app, "acc", [1, 1, 1, 1], 101, 0) == ([3, 4, 5, 6], 101)
    assert tfs(app, "acc", [10, 0, 0, 0], 101, END) == ([13, 4, 5, 6], 101)
    reply = call(app, "POST", "/v1/models/acc:predict", tfs_body([1, 1, 1, 1], 101))
    assert reply.status == 404
    assert error(reply) == "Sequence with provided ID does not exist - id: 101"


def test_two_interleaved_sequences_stay_separate(app: App) -> None:
    tfs(app, "acc", [1, 0, 0, 0], 201, START)
    tfs(app, "acc", [0, 5, 0, 0], 202, START)
    for _ in range(3):
        tfs(app, "acc", [1, 0, 0, 0], 201)
        tfs(app, "acc", [0, 5, 0, 0], 202)
    assert tfs(app, "acc", [0, 0, 0, 0], 201, END)[0] == [4, 0, 0, 0]
    assert tfs(app, "acc", [0, 0, 0, 0], 202, END)[0] == [0, 20, 0, 0]


def test_start_without_an_id_or_with_0_gets_a_server_assigned_one(app: App) -> None:
    values, first = tfs(app, "acc", [1, 1, 1, 1], None, START)
    _, second = tfs(app, "acc", [2, 2, 2, 2], 0, START)
    assert values == [1, 1, 1, 1]
    assert first > 0 and second > 0 and first != second
    assert tfs(app, "acc", [1, 1, 1, 1], first, END)[0] == [2, 2, 2, 2]
    assert tfs(app, "acc", [1, 1, 1, 1], second, END)[0] == [3, 3, 3, 3]


def test_kserve_rest_sequence(app: App) -> None:
    def infer(x: float, control: int) -> dict[str, list[float]]:
        body = {
            "inputs": [
                {"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [x] * 4},
                {"name": "sequence_id", "shape": [1], "datatype": "UINT64", "data": [301]},
                {
                    "name": "sequence_control_input",
                    "shape": [1],
                    "datatype": "UINT32",
                    "data": [control],
                },
            ]
        }
        answer = doc(call(app, "POST", "/v2/models/acc/infer", body))
        return {o["name"]: o["data"] for o in answer["outputs"]}

    assert infer(1.5, START) == {"sum": [1.5] * 4, "sequence_id": [301]}
    assert infer(1.5, 0)["sum"] == [3.0] * 4
    assert infer(1.0, END)["sum"] == [4.0] * 4
    meta = doc(call(app, "GET", "/v2/models/acc"))
    assert {"name": "sequence_id", "datatype": "UINT64", "shape": [1]} in meta["inputs"]
    assert {"name": "sequence_control_input", "datatype": "UINT32", "shape": [1]} in meta["inputs"]
    assert {"name": "sequence_id", "datatype": "UINT64", "shape": [1]} in meta["outputs"]


def test_grpc_sequences_with_uint64_val_and_uint32_val(app: App) -> None:
    def predict(
        stub: prediction_service_pb2_grpc.PredictionServiceStub,
        x: float,
        sequence_id: int,
        control: int,
    ) -> tuple[list[float], int]:
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "acc"
        tfs_grpc.fill_proto(np.full((1, 4), x, np.float32), request.inputs["x"])
        seq = request.inputs["sequence_id"]
        seq.dtype = types_pb2.DT_UINT64
        seq.tensor_shape.dim.add(size=1)
        seq.uint64_val.append(sequence_id)
        ctl = request.inputs["sequence_control_input"]
        ctl.dtype = types_pb2.DT_UINT32
        ctl.tensor_shape.dim.add(size=1)
        ctl.uint32_val.append(control)
        reply = stub.Predict(request)
        echoed = reply.outputs["sequence_id"]
        assert echoed.dtype == types_pb2.DT_UINT64
        return (tfs_grpc.to_numpy(reply.outputs["sum"], "sum")[0].tolist(), echoed.uint64_val[0])

    def infer(
        stub: kgrpc.GRPCInferenceServiceStub, x: float, control: int
    ) -> kpb.ModelInferResponse:
        request = kpb.ModelInferRequest(model_name="acc")
        request.inputs.add(name="x", datatype="FP32", shape=[1, 4]).contents.fp32_contents.extend(
            [x] * 4
        )
        request.inputs.add(
            name="sequence_id", datatype="UINT64", shape=[1]
        ).contents.uint64_contents.append(402)
        request.inputs.add(
            name="sequence_control_input", datatype="UINT32", shape=[1]
        ).contents.uint_contents.append(control)
        return stub.ModelInfer(request)

    with grpc_channel(app.manager) as channel:
        tfs_stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        assert predict(tfs_stub, 1.0, 401, START) == ([1.0] * 4, 401)
        assert predict(tfs_stub, 2.0, 401, 0) == ([3.0] * 4, 401)
        assert predict(tfs_stub, 2.0, 401, END) == ([5.0] * 4, 401)
        with pytest.raises(grpc.RpcError) as caught:
            predict(tfs_stub, 1.0, 401, 0)
        assert caught.value.code() is grpc.StatusCode.NOT_FOUND

        kserve_stub = kgrpc.GRPCInferenceServiceStub(channel)
        infer(kserve_stub, 0.5, START)
        reply = infer(kserve_stub, 0.5, END)
        outputs = dict(zip([o.name for o in reply.outputs], reply.raw_output_contents, strict=True))
        assert np.frombuffer(outputs["sum"], np.float32).tolist() == [1.0] * 4
        assert np.frombuffer(outputs["sequence_id"], np.uint64).tolist() == [402]
        with pytest.raises(grpc.RpcError) as caught:
            infer(kserve_stub, 0.5, 0)
        assert caught.value.code() is grpc.StatusCode.NOT_FOUND
        tfs(app, "acc", [0, 0, 0, 0], 403, START)
        with pytest.raises(grpc.RpcError) as caught:
            predict(tfs_stub, 1.0, 403, START)
        assert caught.value.code() is grpc.StatusCode.ALREADY_EXISTS
        tfs(app, "acc", [0, 0, 0, 0], 403, END)


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (tfs_body([1, 1, 1, 1]), 400, "Sequence id has not been provided in request inputs"),
        (tfs_body([1, 1, 1, 1], 0), 400, "Sequence id has not been provided in request inputs"),
        (tfs_body([1, 1, 1, 1], 501, 3), 400, "sequence_control_input must be 0, 1"),
        (tfs_body([1, 1, 1, 1], 999_999), 404, "Sequence with provided ID does not exist"),
    ],
)
def test_sequence_errors(app: App, body: dict[str, object], status: int, message: str) -> None:
    reply = call(app, "POST", "/v1/models/acc:predict", body)
    assert reply.status == status
    assert message in error(reply)


def test_start_of_an_existing_sequence_is_409(app: App) -> None:
    tfs(app, "acc", [1, 1, 1, 1], 601, START)
    reply = call(app, "POST", "/v1/models/acc:predict", tfs_body([1, 1, 1, 1], 601, START))
    assert reply.status == 409
    assert error(reply) == "Sequence with provided ID already exists - id: 601"
    assert tfs(app, "acc", [1, 1, 1, 1], 601, END)[0] == [2, 2, 2, 2]  # untouched by the 409


def test_max_sequence_number_is_503_until_one_ends(app: App) -> None:
    tfs(app, "acc_one", [1, 1, 1, 1], 701, START)
    reply = call(app, "POST", "/v1/models/acc_one:predict", tfs_body([1, 1, 1, 1], 702, START))
    assert reply.status == 503
    assert "Max sequence number has been reached" in error(reply)
    tfs(app, "acc_one", [1, 1, 1, 1], 701, END)
    assert tfs(app, "acc_one", [1, 1, 1, 1], 702, START) == ([1, 1, 1, 1], 702)
    tfs(app, "acc_one", [1, 1, 1, 1], 702, END)


def test_idle_sequences_are_cleaned_up(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    version = app.manager.get("acc_idle")
    monkeypatch.setattr(version, "idle_seconds", 0.2)
    tfs(app, "acc_idle", [1, 1, 1, 1], 801, START)
    assert tfs(app, "acc_idle", [1, 1, 1, 1], 801)[0] == [2, 2, 2, 2]  # used: still alive
    time.sleep(0.5)
    reply = call(app, "POST", "/v1/models/acc_idle:predict", tfs_body([1, 1, 1, 1], 801))
    assert reply.status == 404
    assert version.sequence_count == 0


def test_low_latency_transformation_loads_and_keeps_state(app: App) -> None:
    status = doc(call(app, "GET", "/v1/models/acc_low_latency"))
    assert status["model_version_status"][0]["state"] == "AVAILABLE"
    tfs(app, "acc_low_latency", [1, 2, 3, 4], 901, START)
    assert tfs(app, "acc_low_latency", [1, 2, 3, 4], 901, END)[0] == [2, 4, 6, 8]


def test_a_stateful_model_imported_from_its_compiled_blob_keeps_sequences(
    app: App, stateful_repo: Repo, tmp_path: Path
) -> None:
    """Served from blobs (export_manager, then OVS_COMPILED_CACHE), with no model read: the
    same signature, and each sequence still keeps its own state."""
    blobs = tmp_path / "blobs"
    assert len(export_manager(app.manager, blobs)) == len(app.manager.models)
    settings = Settings(
        config_path=str(stateful_repo.config),
        cache_dir=str(tmp_path / "cache"),
        compiled_cache=(str(blobs),),
    )
    again = App(ModelManager.start(settings), settings)
    for name, served in again.manager.models.items():
        (version,) = served.versions.values()
        assert version.timings["blob_hit"] == 1.0, name
        original = app.manager.models[name].versions[1]
        assert (version.inputs, version.outputs) == (original.inputs, original.outputs)
    assert tfs(again, "acc_low_latency", [1, 2, 3, 4], 7, START) == ([1, 2, 3, 4], 7)
    assert tfs(again, "acc_low_latency", [1, 1, 1, 1], 8, START) == ([1, 1, 1, 1], 8)
    assert tfs(again, "acc_low_latency", [1, 1, 1, 1], 7, END) == ([2, 3, 4, 5], 7)


def _invoke_acc(
    stateful_repo: Repo, tmp_path: Path, *flags: str, first: tuple[str, ...] = ()
) -> int:
    """`first`: flags placed before the positionals (METHOD PATH)."""
    from handlers import cli

    body = json.dumps(tfs_body([1, 2, 3, 4], 77, START))
    return cli.main(
        [
            "invoke",
            *first,
            "POST",
            "/v1/models/acc:predict",
            "--model_name",
            "acc",
            "--model_path",
            str(stateful_repo.root / "accumulator"),
            "--cache_dir",
            str(tmp_path),
            "--log_level",
            "WARNING",
            "--data",
            body,
            *flags,
        ]
    )


def test_the_ovms_stateful_flags_serve_a_single_model_as_stateful(
    stateful_repo: Repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        _invoke_acc(
            stateful_repo,
            tmp_path,
            "--stateful",
            "--max_sequence_number",
            "2",
            "--idle_sequence_cleanup=false",
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["outputs"]["sequence_id"] == [77]
    assert _invoke_acc(stateful_repo, tmp_path) == 1  # not stateful: sequence_id is no input
    capsys.readouterr()
    assert _invoke_acc(stateful_repo, tmp_path, first=("--stateful",)) == 0  # as cxxopts:
    assert json.loads(capsys.readouterr().out)["outputs"]["sequence_id"] == [77]  # no value
    assert _invoke_acc(stateful_repo, tmp_path, first=("--stateful=false",)) == 1
    capsys.readouterr()
    assert _invoke_acc(stateful_repo, tmp_path, "--low_latency_transformation") == 64
    assert capsys.readouterr().err.strip() == (
        "ov-serverless: Setting low_latency_transformation, max_sequence_number and "
        "idle_sequence_cleanup require setting stateful flag for the model."
    )
