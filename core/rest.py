"""REST endpoint bodies: TF Serving /v1 and KServe v2 /v2, exactly as OVMS answers them.

Functions take the manager and already-routed arguments and return response bytes; the router
in core/api.py turns ServingErrors into `{"error": ...}` replies.
"""

from __future__ import annotations

from typing import Any

from core import metrics
from core.codecs import kserve_rest, tfs_rest
from core.codecs.common import dumps
from core.errors import ServingError, VersionNotFoundError
from core.manager import ModelManager, Servable, ServedModel, ServedPipeline
from core.model import ModelVersion
from core.signature import TensorSpec

SERVER_NAME = "OpenVINO Model Server"
SERVER_VERSION = "ov-serverless 0.1.0"


def tfs_predict(manager: ModelManager, name: str, version: int | None, body: bytes) -> bytes:
    with metrics.track("TensorFlowServing", "REST", "Predict", name, version) as track:
        servable = manager.get(name, version)
        track.version = servable.version
        inputs, form = tfs_rest.decode(body, servable.inputs)
        outputs = track.infer(servable, inputs)
        return tfs_rest.encode(outputs, form)


def tfs_metadata(manager: ModelManager, name: str, version: int | None) -> bytes:
    with metrics.track("TensorFlowServing", "REST", "GetModelMetadata", name, version):
        servable = manager.get(name, version)
        return dumps(tfs_metadata_doc(servable))


def tfs_metadata_doc(servable: ModelVersion) -> dict[str, Any]:
    return {
        "modelSpec": {"name": servable.name, "signatureName": "",
                      "version": str(servable.version)},
        "metadata": {"signature_def": {
            "@type": "type.googleapis.com/tensorflow.serving.SignatureDefMap",
            "signatureDef": {"serving_default": {
                "inputs": {n: _tfs_tensor(s) for n, s in servable.inputs.items()},
                "outputs": {n: _tfs_tensor(s) for n, s in servable.outputs.items()},
                "methodName": "",
                "defaults": {},
            }},
        }},
    }


def _tfs_tensor(spec: TensorSpec) -> dict[str, Any]:
    return {
        "dtype": spec.dtype.tf,
        "tensorShape": {"dim": [{"size": str(_size(d)), "name": ""} for d in spec.dims],
                        "unknownRank": False},
        "name": spec.name,
    }


def _size(dim: tuple[int, int]) -> int:
    return dim[0] if dim[0] == dim[1] else -1


def tfs_status(manager: ModelManager, name: str, version: int | None) -> bytes:
    with metrics.track("TensorFlowServing", "REST", "GetModelStatus", name, None):
        return dumps(status_doc(manager, name, version))


def status_doc(manager: ModelManager, name: str, version: int | None) -> dict[str, Any]:
    """`model_version_status` of one version, or of every version when none is given."""
    served = manager.model(name)
    if version is not None:
        if version not in served.versions:
            raise VersionNotFoundError(name, version)
        selected = [served.versions[version]]
    else:
        selected = [served.versions[v] for v in sorted(served.versions)]
        if not selected:
            served.default_version()  # raises the model's error
    return {"model_version_status": [version_status(v) for v in selected]}


def version_status(version: Servable) -> dict[str, Any]:
    status = version.status
    return {
        "version": str(version.version),
        "state": status.state.name,
        "status": {"error_code": status.error_code, "error_message": status.error_message},
    }


def config_status(manager: ModelManager) -> bytes:
    return dumps(_all_statuses(manager))


def _all_statuses(manager: ModelManager) -> dict[str, Any]:
    served: dict[str, ServedModel | ServedPipeline] = {
        **manager.retired, **manager.models, **manager.pipelines}
    return {
        name: {"model_version_status": [version_status(entry.versions[v])
                                        for v in sorted(entry.versions)]}
        for name, entry in served.items()
    }


def config_reload(manager: ModelManager) -> tuple[bool, bytes]:
    changed = manager.reload()
    return changed, dumps(_all_statuses(manager))


def server_metadata() -> bytes:
    return dumps({"name": SERVER_NAME, "version": SERVER_VERSION,
                  "extensions": ["binary_tensor_data"]})


def kserve_metadata(manager: ModelManager, name: str, version: int | None) -> bytes:
    with metrics.track("KServe", "REST", "ModelMetadata", name, version):
        servable = manager.get(name, version)
        return dumps(kserve_metadata_doc(manager.model(name), servable))


def kserve_metadata_doc(served: ServedModel | ServedPipeline, servable: Servable
                        ) -> dict[str, Any]:
    available = [str(v) for v in sorted(served.versions) if served.versions[v].available]
    return {
        "name": servable.name,
        "versions": available,
        "platform": "OpenVINO",
        "inputs": [_kserve_tensor(s) for s in servable.inputs.values()],
        "outputs": [_kserve_tensor(s) for s in servable.outputs.values()],
    }


def _kserve_tensor(spec: TensorSpec) -> dict[str, Any]:
    return {"name": spec.name, "datatype": spec.dtype.kserve,
            "shape": [_size(d) for d in spec.dims]}


def kserve_ready(manager: ModelManager, name: str, version: int | None
                 ) -> ServingError | None:
    """Why the model (version) cannot serve now, or None when it is ready."""
    with metrics.track("KServe", "REST", "ModelReady", name, None):
        try:
            manager.get(name, version)
        except ServingError as exc:
            return exc
        return None


def kserve_infer(manager: ModelManager, name: str, version: int | None, body: bytes,
                 header_length: str | None) -> tuple[bytes, dict[str, str]]:
    with metrics.track("KServe", "REST", "ModelInfer", name, version) as track:
        servable = manager.get(name, version)
        track.version = servable.version
        request = kserve_rest.decode(body, header_length, servable.inputs)
        outputs = track.infer(servable, request.inputs)
        return kserve_rest.encode(servable.name, servable.version, outputs, request)

