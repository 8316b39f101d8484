"""protos/: generated modules are current, and speak the same wire format as stock clients."""

from __future__ import annotations

import filecmp
import importlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
GEN = ROOT / "protos" / "gen"


def _tree(base: Path) -> set[str]:
    return {
        str(p.relative_to(base))
        for p in base.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


# --- (a) the committed protos/gen is what scripts/gen_protos.sh produces --------------------


def test_generated_modules_are_up_to_date(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    if shutil.which("bash") is None:
        pytest.skip("bash not available")
    out = tmp_path / "gen"
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gen_protos.sh"), str(out)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
    )
    assert proc.returncode == 0, proc.stderr
    fresh, committed = _tree(out), _tree(GEN)
    assert fresh == committed, (
        f"missing: {sorted(fresh - committed)}; stale: {sorted(committed - fresh)}; "
        "run scripts/gen_protos.sh"
    )
    differ = [f for f in sorted(fresh) if not filecmp.cmp(out / f, GEN / f, shallow=False)]
    assert not differ, (
        f"out of date: {differ}; run scripts/gen_protos.sh (with the pinned grpcio-tools)"
    )


# --- descriptors: upstream file names, packages, method paths --------------------------------


def test_descriptor_file_names_are_upstream() -> None:
    from protos.gen.kserve import grpc_predict_v2_pb2
    from protos.gen.tensorflow.core.framework import tensor_pb2
    from protos.gen.tensorflow_serving.apis import predict_pb2

    assert tensor_pb2.DESCRIPTOR.name == "tensorflow/core/framework/tensor.proto"
    assert predict_pb2.DESCRIPTOR.name == "tensorflow_serving/apis/predict.proto"
    assert predict_pb2.PredictRequest.DESCRIPTOR.full_name == "tensorflow.serving.PredictRequest"
    assert tensor_pb2.TensorProto.DESCRIPTOR.full_name == "tensorflow.TensorProto"
    assert grpc_predict_v2_pb2.ModelInferRequest.DESCRIPTOR.full_name == (
        "inference.ModelInferRequest"
    )


def test_full_method_names() -> None:
    from protos.gen.kserve import grpc_predict_v2_pb2 as kfs
    from protos.gen.tensorflow_serving.apis import model_service_pb2, prediction_service_pb2

    def paths(module: object, service: str) -> set[str]:
        svc = module.DESCRIPTOR.services_by_name[service]  # type: ignore[attr-defined]
        return {f"/{svc.full_name}/{m.name}" for m in svc.methods}

    tfs = paths(prediction_service_pb2, "PredictionService")
    assert tfs == {
        "/tensorflow.serving.PredictionService/Predict",
        "/tensorflow.serving.PredictionService/GetModelMetadata",
    }
    assert paths(model_service_pb2, "ModelService") == {
        "/tensorflow.serving.ModelService/GetModelStatus",
        "/tensorflow.serving.ModelService/HandleReloadConfigRequest",
    }
    assert paths(kfs, "GRPCInferenceService") == {
        f"/inference.GRPCInferenceService/{m}"
        for m in (
            "ServerLive",
            "ServerReady",
            "ModelReady",
            "ServerMetadata",
            "ModelMetadata",
            "ModelInfer",
            "ModelStreamInfer",
        )
    }


def test_generated_code_imports_only_under_protos_gen() -> None:
    """No generated module imports a top-level tensorflow/tensorflow_serving/kserve/xla."""
    bad = []
    for path in [*GEN.rglob("*.py"), *GEN.rglob("*.pyi")]:  # not the bytecode beside them
        for line in path.read_text().splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] in ("from", "import"):
                top = words[1].split(".")[0]
                if top in {"tensorflow", "tensorflow_serving", "kserve", "xla"}:
                    bad.append(f"{path.relative_to(ROOT)}: {line}")
    assert not bad


def test_private_pool_keeps_default_pool_clean() -> None:
    """Our files live in protos.pool.POOL, so tritonclient / tensorflow can coexist."""
    from google.protobuf import descriptor_pool

    import protos.gen.kserve.grpc_predict_v2_pb2  # noqa: F401
    import protos.gen.tensorflow_serving.apis.prediction_service_pb2  # noqa: F401
    from protos.pool import POOL

    for name in ("tensorflow/core/framework/tensor.proto", "kserve/grpc_predict_v2.proto"):
        assert POOL.FindFileByName(name).name == name
        with pytest.raises(KeyError):
            descriptor_pool.Default().FindFileByName(name)


def test_fresh_interpreter_imports_ours_alongside_tritonclient() -> None:
    """Import order must not matter: tritonclient's `inference` package then ours, and back."""
    pytest.importorskip("tritonclient.grpc")
    for first, second in (
        ("tritonclient.grpc.service_pb2", "protos.gen.kserve.grpc_predict_v2_pb2"),
        ("protos.gen.kserve.grpc_predict_v2_pb2", "tritonclient.grpc.service_pb2"),
    ):
        subprocess.run([sys.executable, "-c", f"import {first}, {second}"], check=True, cwd=ROOT)


def test_any_metadata_packs_and_unpacks() -> None:
    from protos.gen.tensorflow_serving.apis import get_model_metadata_pb2 as meta

    sigs = meta.SignatureDefMap()
    sig = sigs.signature_def["serving_default"]
    sig.method_name = "tensorflow/serving/predict"
    sig.inputs["x"].name = "x"
    sig.inputs["x"].dtype = 1
    resp = meta.GetModelMetadataResponse()
    resp.model_spec.name = "m"
    resp.metadata["signature_def"].Pack(sigs)
    assert resp.metadata["signature_def"].type_url.endswith("/tensorflow.serving.SignatureDefMap")
    back = meta.SignatureDefMap()
    assert (
        meta.GetModelMetadataResponse.FromString(resp.SerializeToString())
        .metadata["signature_def"]
        .Unpack(back)
    )
    assert back == sigs


# --- schemas: every field a stock client knows has the same number and type here ------------


def _schema_mismatches(src: object, dst: object, path: str = "") -> list[str]:
    """Fields/nested messages of descriptor `src` missing from `dst` or numbered/typed apart."""
    bad = []
    for f in src.fields:  # type: ignore[attr-defined]
        g = dst.fields_by_name.get(f.name)  # type: ignore[attr-defined]
        if g is None or (g.number, g.type, g.is_repeated) != (f.number, f.type, f.is_repeated):
            bad.append(f"{path}{src.name}.{f.name}")  # type: ignore[attr-defined]
    for n in src.nested_types:  # type: ignore[attr-defined]
        other = dst.nested_types_by_name.get(n.name)  # type: ignore[attr-defined]
        sub = f"{path}{src.name}."  # type: ignore[attr-defined]
        bad += [sub + n.name] if other is None else _schema_mismatches(n, other, sub)
    return bad


OVMSCLIENT_SHARED = {
    # our module (under protos.gen.) -> ovmsclient's (under ovmsclient.tfs_compat.protos.)
    "tensorflow.core.framework.tensor_pb2": "tensorflow.core.framework.tensor_pb2",
    "tensorflow.core.framework.tensor_shape_pb2": "tensorflow.core.framework.tensor_shape_pb2",
    "tensorflow.core.framework.resource_handle_pb2": (
        "tensorflow.core.framework.resource_handle_pb2"
    ),
    "tensorflow.core.protobuf.meta_graph_pb2": "tensorflow.core.protobuf.meta_graph_pb2",
    "tensorflow_serving.apis.model_pb2": "tensorflow_serving.apis.model_pb2",
    "tensorflow_serving.apis.predict_pb2": "tensorflow_serving.apis.predict_pb2",
    "tensorflow_serving.apis.get_model_metadata_pb2": (
        "tensorflow_serving.apis.get_model_metadata_pb2"
    ),
    "tensorflow_serving.apis.get_model_status_pb2": "tensorflow_serving.apis.get_model_status_pb2",
    "tensorflow_serving.apis.model_management_pb2": "tensorflow_serving.apis.model_management_pb2",
    "tensorflow_serving.apis.status_pb2": "tensorflow_serving.util.status_pb2",
    "tensorflow_serving.config.model_server_config_pb2": (
        "tensorflow_serving.config.model_server_config_pb2"
    ),
}


def test_schema_covers_ovmsclient_messages() -> None:
    pytest.importorskip("ovmsclient")
    bad = []
    for ours_name, theirs_name in OVMSCLIENT_SHARED.items():
        ours = importlib.import_module(f"protos.gen.{ours_name}").DESCRIPTOR
        theirs = importlib.import_module(f"ovmsclient.tfs_compat.protos.{theirs_name}").DESCRIPTOR
        for name, msg in theirs.message_types_by_name.items():
            if ours_name.endswith("meta_graph_pb2") and name not in ("TensorInfo", "SignatureDef"):
                continue  # trimmed on purpose
            if name not in ours.message_types_by_name:
                bad.append(f"{theirs_name}: {name}")
                continue
            found = _schema_mismatches(msg, ours.message_types_by_name[name])
            if name == "TensorInfo":  # composite_tensor (5) is reserved in our trimmed copy
                found = [b for b in found if "composite_tensor" not in b and "Composite" not in b]
            bad += [f"{theirs_name}: {b}" for b in found]
    assert not bad


def test_kserve_schema_matches_tritonclient() -> None:
    pytest.importorskip("tritonclient.grpc")
    from tritonclient.grpc import service_pb2 as triton

    from protos.gen.kserve import grpc_predict_v2_pb2 as kfs

    bad = []
    for name, msg in kfs.DESCRIPTOR.message_types_by_name.items():
        bad += _schema_mismatches(msg, triton.DESCRIPTOR.message_types_by_name[name])
    assert not bad
    ours = kfs.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    theirs = triton.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    for m in ours.methods:
        t = theirs.methods_by_name[m.name]
        assert (t.input_type.full_name, t.output_type.full_name) == (
            m.input_type.full_name,
            m.output_type.full_name,
        )
        assert (t.client_streaming, t.server_streaming) == (m.client_streaming, m.server_streaming)


# --- (b) TFS wire compatibility with ovmsclient ----------------------------------------------


def test_ovmsclient_predict_request_parses_into_ours() -> None:
    ovms_grpc = pytest.importorskip("ovmsclient.tfs_compat.grpc.requests")
    from ovmsclient.tfs_compat.grpc.tensors import make_tensor_proto

    from protos.gen.tensorflow.core.framework import types_pb2
    from protos.gen.tensorflow_serving.apis import predict_pb2

    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    req = ovms_grpc.make_predict_request(
        {"x": make_tensor_proto(arr), "img": make_tensor_proto([b"\xff\xd8jpeg", b"png"])},
        model_name="resnet",
        model_version=3,
    ).raw_request
    ours = predict_pb2.PredictRequest.FromString(req.SerializeToString())

    assert ours.model_spec.name == "resnet"
    assert ours.model_spec.version.value == 3
    x = ours.inputs["x"]
    assert x.dtype == types_pb2.DT_FLOAT
    assert [d.size for d in x.tensor_shape.dim] == [2, 3]
    assert x.tensor_content == arr.tobytes()
    img = ours.inputs["img"]
    assert img.dtype == types_pb2.DT_STRING
    assert list(img.string_val) == [b"\xff\xd8jpeg", b"png"]
    # Nothing ovmsclient sent is unknown to our schema, and re-encoding is byte-identical.
    assert ours.SerializeToString(deterministic=True) == req.SerializeToString(deterministic=True)


def test_our_predict_response_and_status_parse_in_ovmsclient() -> None:
    pytest.importorskip("ovmsclient")
    from ovmsclient.tfs_compat.grpc.tensors import make_ndarray
    from ovmsclient.tfs_compat.protos.tensorflow_serving.apis import (
        get_model_status_pb2 as ovms_status,
    )
    from ovmsclient.tfs_compat.protos.tensorflow_serving.apis import predict_pb2 as ovms_predict

    from protos.gen.tensorflow.core.framework import types_pb2
    from protos.gen.tensorflow_serving.apis import get_model_status_pb2, predict_pb2

    out = np.array([[0.25, 0.75]], dtype=np.float32)
    resp = predict_pb2.PredictResponse()
    resp.model_spec.name = "resnet"
    resp.model_spec.version.value = 1
    t = resp.outputs["prob"]
    t.dtype = types_pb2.DT_FLOAT
    t.tensor_shape.dim.add(size=1)
    t.tensor_shape.dim.add(size=2)
    t.tensor_content = out.tobytes()
    theirs = ovms_predict.PredictResponse.FromString(resp.SerializeToString())
    np.testing.assert_array_equal(make_ndarray(theirs.outputs["prob"]), out)

    status = get_model_status_pb2.GetModelStatusResponse()
    v = status.model_version_status.add(version=2)
    v.state = get_model_status_pb2.ModelVersionStatus.AVAILABLE
    v.status.error_code = 0
    v.status.error_message = "OK"
    parsed = ovms_status.GetModelStatusResponse.FromString(status.SerializeToString())
    assert parsed.model_version_status[0].version == 2
    assert parsed.model_version_status[0].state == 30
    assert parsed.model_version_status[0].status.error_message == "OK"


# --- (c) KServe v2 wire compatibility with tritonclient -------------------------------------


def test_tritonclient_model_infer_request_parses_into_ours() -> None:
    tc = pytest.importorskip("tritonclient.grpc")
    from tritonclient.grpc import _utils as tc_utils

    from protos.gen.kserve import grpc_predict_v2_pb2 as kfs

    arr = np.arange(4, dtype=np.int64).reshape(1, 4)
    inp = tc.InferInput("input0", list(arr.shape), "INT64")
    inp.set_data_from_numpy(arr)
    request = tc_utils._get_inference_request(
        model_name="dummy",
        inputs=[inp],
        model_version="2",
        request_id="req-1",
        outputs=[tc.InferRequestedOutput("output0")],
        sequence_id=0,
        sequence_start=False,
        sequence_end=False,
        priority=0,
        timeout=None,
        parameters={"mode": "fast", "n": 3},
    )
    ours = kfs.ModelInferRequest.FromString(request.SerializeToString())
    assert (ours.model_name, ours.model_version, ours.id) == ("dummy", "2", "req-1")
    assert ours.inputs[0].name == "input0"
    assert ours.inputs[0].datatype == "INT64"
    assert list(ours.inputs[0].shape) == [1, 4]
    assert ours.outputs[0].name == "output0"
    assert list(ours.raw_input_contents) == [arr.tobytes()]
    assert ours.parameters["mode"].string_param == "fast"
    assert ours.parameters["n"].int64_param == 3


# --- live round trips: stock clients against servicers built from our generated stubs --------


@pytest.fixture
def grpc_server() -> Iterator[tuple[object, int]]:
    grpc = pytest.importorskip("grpc")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    port = server.add_insecure_port("127.0.0.1:0")
    yield server, port
    server.stop(None)


def test_ovmsclient_predict_against_our_prediction_service(
    grpc_server: tuple[object, int],
) -> None:
    ovmsclient = pytest.importorskip("ovmsclient")
    from protos.gen.tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    seen: list[predict_pb2.PredictRequest] = []

    class Servicer(prediction_service_pb2_grpc.PredictionServiceServicer):
        def Predict(self, request, context):  # noqa: N802 - gRPC method name
            seen.append(request)
            resp = predict_pb2.PredictResponse()
            resp.model_spec.CopyFrom(request.model_spec)
            resp.outputs["y"].CopyFrom(request.inputs["x"])
            return resp

    server, port = grpc_server
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Servicer(), server)
    server.start()  # type: ignore[attr-defined]

    client = ovmsclient.make_grpc_client(f"127.0.0.1:{port}")
    arr = np.array([[1.5, -2.0, 3.25]], dtype=np.float32)
    result = client.predict({"x": arr}, "echo", model_version=7)
    np.testing.assert_array_equal(result, arr)
    assert seen[0].model_spec.name == "echo"
    assert seen[0].model_spec.version.value == 7


def test_tritonclient_infer_against_our_inference_service(
    grpc_server: tuple[object, int],
) -> None:
    tc = pytest.importorskip("tritonclient.grpc")
    from protos.gen.kserve import grpc_predict_v2_pb2 as kfs
    from protos.gen.kserve import grpc_predict_v2_pb2_grpc as kfs_grpc

    class Servicer(kfs_grpc.GRPCInferenceServiceServicer):
        def ServerLive(self, request, context):  # noqa: N802 - gRPC method name
            return kfs.ServerLiveResponse(live=True)

        def ModelInfer(self, request, context):  # noqa: N802 - gRPC method name
            resp = kfs.ModelInferResponse(
                model_name=request.model_name, model_version="1", id=request.id
            )
            out = resp.outputs.add(name="output0", datatype=request.inputs[0].datatype)
            out.shape.extend(request.inputs[0].shape)
            resp.raw_output_contents.append(request.raw_input_contents[0])
            return resp

    server, port = grpc_server
    kfs_grpc.add_GRPCInferenceServiceServicer_to_server(Servicer(), server)
    server.start()  # type: ignore[attr-defined]

    client = tc.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        assert client.is_server_live()
        arr = np.arange(6, dtype=np.float32).reshape(2, 3)
        inp = tc.InferInput("input0", list(arr.shape), "FP32")
        inp.set_data_from_numpy(arr)
        result = client.infer("echo", [inp], request_id="r7")
        np.testing.assert_array_equal(result.as_numpy("output0"), arr)
        assert result.get_response().id == "r7"
    finally:
        client.close()


def test_reflection_served_from_private_pool(grpc_server: tuple[object, int]) -> None:
    """gRPC reflection must be given pool=protos.pool.POOL; adopt() adds e.g. health."""
    grpc = pytest.importorskip("grpc")
    reflection = pytest.importorskip("grpc_reflection.v1alpha.reflection")
    health_pb2 = pytest.importorskip("grpc_health.v1.health_pb2")
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
        ProtoReflectionDescriptorDatabase,
    )

    import protos.gen.kserve.grpc_predict_v2_pb2  # noqa: F401
    import protos.gen.tensorflow_serving.apis.prediction_service_pb2  # noqa: F401
    from protos.pool import POOL, adopt

    adopt(health_pb2.DESCRIPTOR)
    adopt(health_pb2.DESCRIPTOR)  # idempotent
    names = [
        "tensorflow.serving.PredictionService",
        "inference.GRPCInferenceService",
        "grpc.health.v1.Health",
        reflection.SERVICE_NAME,
    ]
    server, port = grpc_server
    reflection.enable_server_reflection(names, server, pool=POOL)
    server.start()  # type: ignore[attr-defined]
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        db = ProtoReflectionDescriptorDatabase(channel)
        assert set(db.get_services()) == set(names)
        found = db.FindFileContainingSymbol("tensorflow.serving.PredictionService")
        assert found.name == "tensorflow_serving/apis/prediction_service.proto"
        assert db.FindFileContainingSymbol("grpc.health.v1.Health").name == (
            "grpc_health/v1/health.proto"
        )
