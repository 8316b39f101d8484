"""A failure inside OpenVINO's inference answers OVMS's internal inference error: 500 on REST,
INTERNAL on gRPC, a short message naming the model and version, the native text only in the
server's log.

The model passes every check made before inference (x: f32[-1]) and fails inside the CPU
plugin when x has a size that its Reshape to [3, -1] cannot take.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import grpc
import numpy as np
import openvino as ov
import pytest
import requests
import tritonclient.grpc as triton_grpc
from openvino import opset13 as ops
from tritonclient.utils import InferenceServerException

from protos.gen.tensorflow.core.framework import types_pb2
from protos.gen.tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
from tests.core.helpers import save_ir
from tests.handlers.grpc_server.helpers import Server

MESSAGE = "Internal inference error - name: {name}; version: 1"
NATIVE = "conflicts with the reshape pattern"  # the CPU plugin's own words


def rows_of_three() -> ov.Model:
    x = ops.parameter([-1], np.float32, name="x")
    x.output(0).set_names({"x"})
    y = ops.reshape(x, ops.constant(np.array([3, -1], np.int64)), special_zero=False)
    y.output(0).set_names({"y"})
    return ov.Model([y], [x], "rows_of_three")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("infer-errors")
    save_ir(rows_of_three(), root / "rows" / "1")
    save_ir(rows_of_three(), root / "rows_stateful" / "1")
    config = {
        "model_config_list": [
            {"config": {"name": "rows", "base_path": str(root / "rows")}},
            {
                "config": {
                    "name": "rows_stateful",
                    "base_path": str(root / "rows_stateful"),
                    "stateful": True,
                }
            },
        ]
    }
    (root / "config.json").write_text(json.dumps(config))
    running = Server.start(root / "config.json", root)
    try:
        yield running
    finally:
        running.stop()


def _predict(
    server: Server, name: str, values: list[float], **more: list[int]
) -> requests.Response:
    url = f"http://127.0.0.1:{server.rest_port}/v1/models/{name}:predict"
    return requests.post(url, data=json.dumps({"inputs": {"x": values, **more}}), timeout=60)


def _logged(server: Server) -> str:
    return server.log.read_text(errors="replace")


def test_rest_answers_500_with_a_short_message(server: Server) -> None:
    assert _predict(server, "rows", [1.0] * 6).json() == {"outputs": [[1.0, 1.0]] * 3}
    reply = _predict(server, "rows", [1.0] * 4)
    assert reply.status_code == 500
    assert reply.json() == {"error": MESSAGE.format(name="rows")}
    kserve = requests.post(
        f"http://127.0.0.1:{server.rest_port}/v2/models/rows/infer",
        timeout=60,
        data=json.dumps(
            {"inputs": [{"name": "x", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
        ),
    )
    assert kserve.status_code == 500
    assert kserve.json() == {"error": MESSAGE.format(name="rows")}


def test_stateful_model_answers_the_same(server: Server) -> None:
    reply = _predict(server, "rows_stateful", [1.0] * 4, sequence_control_input=[1])
    assert reply.status_code == 500
    assert reply.json() == {"error": MESSAGE.format(name="rows_stateful")}


def test_grpc_answers_internal(server: Server) -> None:
    client = triton_grpc.InferenceServerClient(server.target)
    x = triton_grpc.InferInput("x", [4], "FP32")
    x.set_data_from_numpy(np.ones(4, np.float32))
    with pytest.raises(InferenceServerException) as raised:
        client.infer("rows", [x])
    assert raised.value.status() == "StatusCode.INTERNAL"
    assert raised.value.message() == MESSAGE.format(name="rows")

    request = predict_pb2.PredictRequest()
    request.model_spec.name = "rows"
    tensor = request.inputs["x"]
    tensor.dtype = types_pb2.DT_FLOAT
    tensor.tensor_shape.dim.add(size=4)
    tensor.float_val.extend([1.0] * 4)
    with grpc.insecure_channel(server.target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        with pytest.raises(grpc.RpcError) as failed:
            stub.Predict(request, timeout=30)
    assert failed.value.code() == grpc.StatusCode.INTERNAL
    assert failed.value.details() == MESSAGE.format(name="rows")


def test_the_native_cause_is_logged_not_answered(server: Server) -> None:
    reply = _predict(server, "rows", [1.0] * 5)
    assert reply.status_code == 500
    for leak in (NATIVE, "Check '", "src/", "Exception from"):
        assert leak not in reply.text
    log = _logged(server)
    assert "Inference failed - name: rows; version: 1" in log
    assert NATIVE in log
