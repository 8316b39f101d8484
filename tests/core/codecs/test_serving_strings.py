"""String (BYTES / DT_STRING) tensors end to end, through the real clients and raw HTTP.

Models are real OpenVINO string models: `lengths` (text: string[-1] -> lengths: i32, the
byte length of each element, with openvino-tokenizers' StringTensorUnpack, loaded with
--cpu_extension as OVMS users do) and `pick` (text: string[-1,-1], index: i32[-1] -> picked:
string[-1,-1], rows of text gathered by index: core ops only, strings out). `upper` pipelines
run a Python custom node that returns its strings as numpy unicode, object str, object bytes
or a list, then feed them to `lengths`.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import openvino as ov
import openvino_tokenizers
import pytest
import requests
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from openvino import opset13 as ops
from ovmsclient import make_grpc_client, make_http_client

from protos.gen.kserve import grpc_predict_v2_pb2 as kserve_pb
from protos.gen.kserve import grpc_predict_v2_pb2_grpc
from protos.gen.tensorflow.core.framework import tensor_pb2, types_pb2
from protos.gen.tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
from tests.core.helpers import save_ir
from tests.handlers.grpc_server.helpers import Server

NOT_UTF8 = b"\xff\xfeok"
KINDS = ("unicode", "object", "bytes", "list")
NODE = Path(__file__).parents[1] / "serving" / "pipeline" / "nodes" / "upper.py"


# -- models and server -------------------------------------------------------------------------


def lengths_model() -> ov.Model:
    factory = openvino_tokenizers._get_factory()
    text = ops.parameter([-1], ov.Type.string, name="text")
    text.output(0).set_names({"text"})
    begins, ends, _chars = factory.create("StringTensorUnpack", text.outputs()).outputs()
    lengths = ops.subtract(ends, begins)
    lengths.output(0).set_names({"lengths"})
    return ov.Model([lengths], [text], "lengths")


def pick_model(output: str = "picked") -> ov.Model:
    text = ops.parameter([-1, -1], ov.Type.string, name="text")
    text.output(0).set_names({"text"})
    index = ops.parameter([-1], np.int32, name="index")
    index.output(0).set_names({"index"})
    picked = ops.gather(text, index, ops.constant(np.int64(0)))
    picked.output(0).set_names({output})
    return ov.Model([picked], [text, index], "pick")


def _pipeline(kind: str) -> dict[str, Any]:
    return {
        "name": f"upper_{kind}",
        "inputs": ["text"],
        "nodes": [
            {
                "name": "upper",
                "library_name": "upper",
                "type": "custom",
                "params": {"kind": kind},
                "inputs": [{"text": {"node_name": "request", "data_item": "text"}}],
                "outputs": [{"data_item": "texts", "alias": "texts"}],
            },
            {
                "name": "count",
                "model_name": "lengths",
                "type": "DL model",
                "inputs": [{"text": {"node_name": "upper", "data_item": "texts"}}],
                "outputs": [{"data_item": "lengths", "alias": "lengths"}],
            },
        ],
        "outputs": [
            {"texts": {"node_name": "upper", "data_item": "texts"}},
            {"lengths": {"node_name": "count", "data_item": "lengths"}},
        ],
    }


def _demux_pipeline() -> dict[str, Any]:
    """upper runs as a demultiplexer: each text is an item; the output gathers them back."""
    return {
        "name": "upper_demux",
        "inputs": ["text"],
        "nodes": [
            {
                "name": "upper",
                "library_name": "upper",
                "type": "custom",
                "demultiply_count": 0,
                "params": {"kind": "bytes"},
                "inputs": [{"text": {"node_name": "request", "data_item": "text"}}],
                "outputs": [{"data_item": "texts", "alias": "texts"}],
            }
        ],
        "outputs": [{"texts": {"node_name": "upper", "data_item": "texts"}}],
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("strings")
    save_ir(lengths_model(), root / "lengths" / "1")
    save_ir(pick_model(), root / "pick" / "1")
    save_ir(pick_model("picked_bytes"), root / "pick_bytes" / "1")
    config = {
        "model_config_list": [
            {"config": {"name": n, "base_path": str(root / n)}}
            for n in ("lengths", "pick", "pick_bytes")
        ],
        "custom_node_library_config_list": [{"name": "upper", "base_path": str(NODE)}],
        "pipeline_config_list": [*(_pipeline(kind) for kind in (*KINDS, "bad")), _demux_pipeline()],
    }
    (root / "config.json").write_text(json.dumps(config))
    running = Server.start(
        root / "config.json", root, "--cpu_extension", str(openvino_tokenizers._ext_path)
    )
    try:
        yield running
    finally:
        running.stop()


def _rest(server: Server) -> str:
    return f"http://127.0.0.1:{server.rest_port}"


def _post(server: Server, path: str, doc: Any) -> requests.Response:
    return requests.post(_rest(server) + path, data=json.dumps(doc), timeout=60)


def _b64(data: bytes) -> dict[str, str]:
    return {"b64": base64.b64encode(data).decode("ascii")}


def _objects(*items: bytes) -> np.ndarray:
    array = np.empty(len(items), dtype=object)
    array[:] = list(items)
    return array


# -- metadata ----------------------------------------------------------------------------------


def test_metadata_advertises_bytes_and_dt_string(server: Server) -> None:
    kserve = requests.get(_rest(server) + "/v2/models/pick", timeout=30).json()
    inputs = {t["name"]: t for t in kserve["inputs"]}
    assert inputs["text"] == {"name": "text", "datatype": "BYTES", "shape": [-1, -1]}
    assert kserve["outputs"][0] == {"name": "picked", "datatype": "BYTES", "shape": [-1, -1]}
    tfs = requests.get(_rest(server) + "/v1/models/lengths/metadata", timeout=30).json()
    assert (
        tfs["metadata"]["signature_def"]["signatureDef"]["serving_default"]["inputs"]["text"][
            "dtype"
        ]
        == "DT_STRING"
    )


# -- TFS REST ----------------------------------------------------------------------------------


def test_tfs_rest_row_strings_answer_lengths(server: Server) -> None:
    reply = _post(server, "/v1/models/lengths:predict", {"instances": ["ab", "cde"]})
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"predictions": [2, 3]}


def test_tfs_rest_columnar_b64_and_utf8(server: Server) -> None:
    reply = _post(
        server, "/v1/models/lengths:predict", {"inputs": {"text": [_b64(NOT_UTF8), "é", ""]}}
    )
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"outputs": [4, 2, 0]}


def test_tfs_rest_string_outputs_utf8_or_b64(server: Server) -> None:
    doc = {"inputs": {"text": [["a", "b"], [_b64(NOT_UTF8), "ü"]], "index": [1, 0, 1]}}
    reply = _post(server, "/v1/models/pick:predict", doc)
    assert reply.status_code == 200, reply.text
    row = [_b64(NOT_UTF8), "ü"]
    assert reply.json() == {"outputs": [row, ["a", "b"], row]}
    rows = _post(
        server,
        "/v1/models/pick:predict",
        {"instances": [{"text": ["x", "y"], "index": 1}, {"text": ["z", "w"], "index": 0}]},
    )
    assert rows.status_code == 200, rows.text
    assert rows.json() == {"predictions": [["z", "w"], ["x", "y"]]}


def test_tfs_rest_outputs_named_bytes_are_always_b64(server: Server) -> None:
    """TF Serving's rule: a string output whose name ends with "_bytes" is written as
    {"b64": ...}, row and columnar."""
    doc = {"inputs": {"text": [["a", "é"]], "index": [0]}}
    reply = _post(server, "/v1/models/pick_bytes:predict", doc)
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"outputs": [[_b64(b"a"), _b64("é".encode())]]}
    rows = _post(
        server, "/v1/models/pick_bytes:predict", {"instances": [{"text": ["x"], "index": 0}]}
    )
    assert rows.json() == {"predictions": [[_b64(b"x")]]}


def test_tfs_rest_numbers_for_a_string_input_are_a_400(server: Server) -> None:
    reply = _post(server, "/v1/models/lengths:predict", {"instances": [1, 2]})
    assert reply.status_code == 400
    assert "text" in reply.json()["error"]


def test_ovmsclient_http_strings(server: Server) -> None:
    client = make_http_client(f"127.0.0.1:{server.rest_port}")
    got = client.predict({"text": np.array([b"ab", b"cde", NOT_UTF8])}, "lengths")
    assert got.tolist() == [2, 3, 4]
    got = client.predict(
        {"text": np.array([[b"x", "é".encode()]]), "index": np.array([0], np.int32)}, "pick"
    )
    assert got.tolist() == [["x", "é"]]


# -- KServe REST -------------------------------------------------------------------------------


def test_kserve_json_bytes(server: Server) -> None:
    doc = {"inputs": [{"name": "text", "shape": [2], "datatype": "BYTES", "data": ["ab", "cde"]}]}
    reply = _post(server, "/v2/models/lengths/infer", doc)
    assert reply.status_code == 200, reply.text
    assert reply.json()["outputs"] == [
        {"name": "lengths", "datatype": "INT32", "shape": [2], "data": [2, 3]}
    ]
    doc = {
        "inputs": [
            {"name": "text", "shape": [2, 1], "datatype": "BYTES", "data": ["pä", "q"]},
            {"name": "index", "shape": [2], "datatype": "INT32", "data": [1, 1]},
        ]
    }
    reply = _post(server, "/v2/models/pick/infer", doc)
    assert reply.status_code == 200, reply.text
    assert reply.json()["outputs"] == [
        {"name": "picked", "datatype": "BYTES", "shape": [2, 1], "data": ["q", "q"]}
    ]


def test_kserve_binary_extension_in_and_out(server: Server) -> None:
    items = [b"ab", NOT_UTF8, b""]
    framed = b"".join(struct.pack("<I", len(item)) + item for item in items)
    index = np.array([1, 2], np.int32)
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "text",
                    "shape": [3, 1],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(framed)},
                },
                {
                    "name": "index",
                    "shape": [2],
                    "datatype": "INT32",
                    "parameters": {"binary_data_size": index.nbytes},
                },
            ],
            "outputs": [{"name": "picked", "parameters": {"binary_data": True}}],
        }
    ).encode()
    reply = requests.post(
        _rest(server) + "/v2/models/pick/infer",
        data=header + framed + index.tobytes(),
        timeout=60,
        headers={"Inference-Header-Content-Length": str(len(header))},
    )
    assert reply.status_code == 200, reply.text
    size = int(reply.headers["Inference-Header-Content-Length"])
    out = json.loads(reply.content[:size])["outputs"][0]
    assert out["datatype"] == "BYTES" and out["shape"] == [2, 1]
    expected = struct.pack("<I", len(NOT_UTF8)) + NOT_UTF8 + struct.pack("<I", 0)
    assert reply.content[size:] == expected
    assert out["parameters"]["binary_data_size"] == len(expected)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_tritonclient_http_strings(server: Server, binary: bool) -> None:
    client = triton_http.InferenceServerClient(f"127.0.0.1:{server.rest_port}")
    text = triton_http.InferInput("text", [2, 2], "BYTES")
    text.set_data_from_numpy(
        np.array([[b"a", b"bc"], ["dé".encode(), b"f"]], dtype=object), binary_data=binary
    )
    index = triton_http.InferInput("index", [1], "INT32")
    index.set_data_from_numpy(np.array([1], np.int32), binary_data=binary)
    result = client.infer(
        "pick",
        [text, index],
        outputs=[triton_http.InferRequestedOutput("picked", binary_data=binary)],
    )
    got = result.as_numpy("picked")
    assert got.shape == (1, 2)
    assert [x if isinstance(x, bytes) else x.encode() for x in got.ravel()] == ["dé".encode(), b"f"]


# -- TFS gRPC ----------------------------------------------------------------------------------


def test_ovmsclient_grpc_strings(server: Server) -> None:
    client = make_grpc_client(server.target)
    assert client.predict({"text": np.array([b"ab", b"cde"])}, "lengths").tolist() == [2, 3]
    got = client.predict(
        {"text": np.array([[b"x", NOT_UTF8]]), "index": np.array([0, 0], np.int32)}, "pick"
    )
    assert got.tolist() == [[b"x", NOT_UTF8], [b"x", NOT_UTF8]]


def _pick_request(
    shape: tuple[int, int], strings: list[bytes], index: list[int]
) -> predict_pb2.PredictRequest:
    """A TF Serving Predict of the "pick" model: a string tensor, the rows to pick."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "pick"
    text = request.inputs["text"]
    text.dtype = types_pb2.DT_STRING
    for size in shape:
        text.tensor_shape.dim.add(size=size)
    text.string_val.extend(strings)
    rows = request.inputs["index"]
    rows.dtype = types_pb2.DT_INT32
    rows.tensor_shape.dim.add(size=len(index))
    rows.int_val.extend(index)
    return request


def test_tfs_stub_string_val(server: Server) -> None:
    request = _pick_request((2, 1), [b"one", NOT_UTF8], [1])
    with grpc.insecure_channel(server.target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        reply = stub.Predict(request, timeout=30)
    out: tensor_pb2.TensorProto = reply.outputs["picked"]
    assert out.dtype == types_pb2.DT_STRING
    assert [d.size for d in out.tensor_shape.dim] == [1, 1]
    assert list(out.string_val) == [NOT_UTF8]


# -- KServe gRPC -------------------------------------------------------------------------------


def test_tritonclient_grpc_strings(server: Server) -> None:
    client = triton_grpc.InferenceServerClient(server.target)
    text = triton_grpc.InferInput("text", [3], "BYTES")
    text.set_data_from_numpy(_objects(b"ab", b"cde", NOT_UTF8))
    result = client.infer("lengths", [text])
    assert result.as_numpy("lengths").tolist() == [2, 3, 4]
    text = triton_grpc.InferInput("text", [1, 2], "BYTES")
    text.set_data_from_numpy(np.array([[b"k", NOT_UTF8]], dtype=object))
    index = triton_grpc.InferInput("index", [2], "INT32")
    index.set_data_from_numpy(np.array([0, 0], np.int32))
    got = client.infer("pick", [text, index]).as_numpy("picked")
    assert got.tolist() == [[b"k", NOT_UTF8], [b"k", NOT_UTF8]]


def test_kserve_stub_bytes_contents(server: Server) -> None:
    request = kserve_pb.ModelInferRequest(model_name="lengths")
    tensor = request.inputs.add(name="text", datatype="BYTES", shape=[2])
    tensor.contents.bytes_contents.extend([b"ab", NOT_UTF8])
    with grpc.insecure_channel(server.target) as channel:
        stub = grpc_predict_v2_pb2_grpc.GRPCInferenceServiceStub(channel)
        reply = stub.ModelInfer(request, timeout=30)
    assert reply.outputs[0].datatype == "INT32"
    assert np.frombuffer(reply.raw_output_contents[0], np.int32).tolist() == [2, 4]


def test_string_output_without_elements_keeps_the_server_up(server: Server) -> None:
    """An empty index picks no rows: a [0, 2] string output, answered on both gRPC APIs.
    (OpenVINO's Tensor.bytes_data of a string tensor without elements dies of SIGFPE; the
    server must not read it.)"""
    request = _pick_request((1, 2), [b"a", b"b"], [])
    infer = kserve_pb.ModelInferRequest(model_name="pick")
    infer.inputs.add(name="text", datatype="BYTES", shape=[1, 2]).contents.bytes_contents.extend(
        [b"a", b"b"]
    )
    infer.inputs.add(name="index", datatype="INT32", shape=[0])
    with grpc.insecure_channel(server.target) as channel:
        tfs = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(
            request, timeout=30
        )
        kserve = grpc_predict_v2_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(
            infer, timeout=30
        )
    out: tensor_pb2.TensorProto = tfs.outputs["picked"]
    assert out.dtype == types_pb2.DT_STRING
    assert [d.size for d in out.tensor_shape.dim] == [0, 2] and list(out.string_val) == []
    assert (kserve.outputs[0].datatype, list(kserve.outputs[0].shape)) == ("BYTES", [0, 2])
    assert list(kserve.raw_output_contents) == [b""]
    rest = _post(server, "/v1/models/pick:predict", {"inputs": {"text": [["a"]], "index": []}})
    assert rest.status_code == 200, rest.text
    assert rest.json() == {"outputs": []}


def test_string_outputs_all_empty_come_back_empty(server: Server) -> None:
    """Every picked element empty: each comes back b"", on both gRPC APIs, after a call that
    left other strings in memory (OpenVINO's Tensor.bytes_data reads one stale byte per element
    when all are empty: "x" or garbage came back)."""
    with grpc.insecure_channel(server.target) as channel:
        triton = triton_grpc.InferenceServerClient(server.target)
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        for _ in range(3):
            for words in ([b"xy", b"x"], [b"", b""]):
                text = triton_grpc.InferInput("text", [1, 2], "BYTES")
                text.set_data_from_numpy(_objects(*words).reshape(1, 2))
                index = triton_grpc.InferInput("index", [2], "INT32")
                index.set_data_from_numpy(np.array([0, 0], np.int32))
                got = triton.infer("pick", [text, index]).as_numpy("picked")
                assert got is not None and got.tolist() == [words, words]
                reply = stub.Predict(_pick_request((2, 1), words, [1, 1]), timeout=30)
                assert list(reply.outputs["picked"].string_val) == [words[1], words[1]]


# -- pipelines with a Python custom node -------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_custom_node_strings_on_every_api(server: Server, kind: str) -> None:
    """A custom node's strings (numpy unicode, object str or bytes, a list) come back as a
    string tensor on all four fronts, and flow on into a string model."""
    name = f"upper_{kind}"
    words = [b"ab", "çd".encode()]
    expected_texts, expected_lengths = [b"AB", "ÇD".encode()], [2, 3]

    tfs = _post(server, f"/v1/models/{name}:predict", {"inputs": {"text": ["ab", "çd"]}})
    assert tfs.status_code == 200, tfs.text
    assert tfs.json() == {"outputs": {"texts": ["AB", "ÇD"], "lengths": expected_lengths}}

    http = triton_http.InferenceServerClient(f"127.0.0.1:{server.rest_port}")
    for binary in (True, False):
        text = triton_http.InferInput("text", [2], "BYTES")
        text.set_data_from_numpy(_objects(*words), binary_data=binary)
        result = http.infer(
            name,
            [text],
            outputs=[
                triton_http.InferRequestedOutput(out, binary_data=binary)
                for out in ("texts", "lengths")
            ],
        )
        got = result.as_numpy("texts")
        assert [x if isinstance(x, bytes) else x.encode() for x in got] == expected_texts
        assert result.as_numpy("lengths").tolist() == expected_lengths

    grpc_client = triton_grpc.InferenceServerClient(server.target)
    text = triton_grpc.InferInput("text", [2], "BYTES")
    text.set_data_from_numpy(_objects(*words))
    result = grpc_client.infer(name, [text])
    assert result.as_numpy("texts").tolist() == expected_texts
    assert result.as_numpy("lengths").tolist() == expected_lengths

    got = make_grpc_client(server.target).predict({"text": np.array(words)}, name)
    assert got["texts"].tolist() == expected_texts
    assert got["lengths"].tolist() == expected_lengths


def test_custom_node_non_string_objects_are_its_bug(server: Server) -> None:
    reply = _post(server, "/v1/models/upper_bad:predict", {"instances": ["ab"]})
    assert reply.status_code == 500
    assert (
        reply.json()["error"]
        == "Custom node upper output texts: string tensors hold str or bytes, not int"
    )


def test_demultiplexed_strings_gather_back(server: Server) -> None:
    reply = _post(server, "/v1/models/upper_demux:predict", {"instances": ["ab", "c", ""]})
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"predictions": ["AB", "C", ""]}
    client = triton_grpc.InferenceServerClient(server.target)
    text = triton_grpc.InferInput("text", [2], "BYTES")
    text.set_data_from_numpy(_objects(b"a\x00b", b"q"))
    got = client.infer("upper_demux", [text]).as_numpy("texts")
    assert got.tolist() == [b"A\x00B", b"Q"]
