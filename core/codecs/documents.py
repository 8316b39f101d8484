"""Metadata and status documents, as OVMS answers them, shared by REST and gRPC.

REST sends them as JSON; gRPC parses the same dicts into its protos (json_format), so the two
fronts cannot drift. Each function formats what it is given and resolves nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from core.tensors.spec import TensorSpec

SERVER_NAME = "OpenVINO Model Server"
SERVER_VERSION = "ov-serverless 0.1.0"


class Named(Protocol):
    """A servable version as replies name it."""

    name: str
    version: int


class Signed(Named, Protocol):
    """A servable version with its signature, as codecs read it."""

    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]


class Described(Signed, Protocol):
    """What the documents read of a servable version."""

    @property
    def status(self) -> Any: ...

    @property
    def available(self) -> bool: ...


def server_metadata() -> dict[str, Any]:
    return {"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": ["binary_tensor_data"]}


def tfs_metadata(servable: Described) -> dict[str, Any]:
    """TF Serving GetModelMetadata: the serving_default signature."""
    return {
        "modelSpec": {"name": servable.name, "signatureName": "", "version": str(servable.version)},
        "metadata": {
            "signature_def": {
                "@type": "type.googleapis.com/tensorflow.serving.SignatureDefMap",
                "signatureDef": {
                    "serving_default": {
                        "inputs": {n: _tfs_tensor(s) for n, s in servable.inputs.items()},
                        "outputs": {n: _tfs_tensor(s) for n, s in servable.outputs.items()},
                        "methodName": "",
                        "defaults": {},
                    }
                },
            }
        },
    }


def _tfs_tensor(spec: TensorSpec) -> dict[str, Any]:
    return {
        "dtype": spec.dtype.tf,
        "tensorShape": {
            "dim": [{"size": str(_size(d)), "name": ""} for d in spec.dims],
            "unknownRank": False,
        },
        "name": spec.name,
    }


def _size(dim: tuple[int, int]) -> int:
    return dim[0] if dim[0] == dim[1] else -1


def model_status(versions: Iterable[Described]) -> dict[str, Any]:
    """TF Serving GetModelStatus of the given versions."""
    return {"model_version_status": [version_status(v) for v in versions]}


def version_status(version: Described) -> dict[str, Any]:
    status = version.status
    return {
        "version": str(version.version),
        "state": status.state.name,
        "status": {"error_code": status.error_code, "error_message": status.error_message},
    }


def kserve_metadata(servable: Described, versions: Iterable[Described]) -> dict[str, Any]:
    """KServe model metadata: `versions` lists the model's AVAILABLE ones; the tensors are
    sorted by name, as OVMS lists them (from its name-ordered tensor maps)."""
    return {
        "name": servable.name,
        "versions": [str(v.version) for v in versions if v.available],
        "platform": "OpenVINO",
        "inputs": [_kserve_tensor(s) for s in _by_name(servable.inputs.values())],
        "outputs": [_kserve_tensor(s) for s in _by_name(servable.outputs.values())],
    }


def _by_name(specs: Iterable[TensorSpec]) -> list[TensorSpec]:
    return sorted(specs, key=lambda spec: spec.name)


def _kserve_tensor(spec: TensorSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "datatype": spec.dtype.kserve,
        "shape": [_size(d) for d in spec.dims],
    }
