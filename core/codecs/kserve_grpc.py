"""KServe v2 gRPC (inference.GRPCInferenceService): ModelInfer and the metadata/readiness RPCs.

Input buffers come in `raw_input_contents` (one per input, read with np.frombuffer without a
copy; BYTES elements carry a 4-byte little-endian length prefix) or in the typed `contents`,
never both (OVMS INVALID_MESSAGE_STRUCTURE). Outputs go back in `raw_output_contents`, which is
what tritonclient reads. Metadata reuses core.rest's KServe document.
"""

from __future__ import annotations

import numpy as np
from google.protobuf import json_format

from core import limits, metrics, rest, tensors
from core.codecs.kserve_rest import from_binary, to_binary
from core.errors import InvalidInputError, ServingError, VersionNotFoundError
from core.manager import ModelManager
from core.model import ModelVersion
from core.signature import Inputs
from protos.gen.kserve import grpc_predict_v2_pb2 as pb
from protos.pool import POOL

API = "KServe"

_CONTENTS = {
    "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents",
    "INT32": "int_contents", "INT64": "int64_contents", "UINT8": "uint_contents",
    "UINT16": "uint_contents", "UINT32": "uint_contents", "UINT64": "uint64_contents",
    "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents",
}


def parse_version(text: str) -> int | None:
    """"" and "0" mean the default version; anything but digits is rejected."""
    if not text:
        return None
    if not text.isdigit() or len(text) > 18:
        raise InvalidInputError(f"Model version is invalid format: {text[:20]}")
    return int(text) or None


# -- tensors -------------------------------------------------------------------------------------


def decode_inputs(request: pb.ModelInferRequest) -> Inputs:
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise InvalidInputError(
            f"Number of raw_input_contents ({len(raw)}) does not match the number of "
            f"inputs ({len(request.inputs)})"
        )
    inputs: Inputs = {}
    for index, tensor in enumerate(request.inputs):
        name = tensor.name
        if name in inputs:
            raise InvalidInputError(f"Duplicated input name: {name}")
        dtype = tensors.from_kserve(tensor.datatype)
        shape = list(tensor.shape)
        count = limits.check_shape(shape, name, dtype.numpy.itemsize)
        if raw:
            if tensor.contents.ListFields():
                raise InvalidInputError(
                    "Passing buffers both in InferInputTensor contents and in "
                    f"raw_input_contents is not allowed; input name: {name}"
                )
            inputs[name] = from_binary(memoryview(raw[index]), dtype, shape, count, name)
        else:
            inputs[name] = _from_contents(tensor.contents, dtype, shape, count, name)
    return inputs


def _from_contents(contents: pb.InferTensorContents, dtype: tensors.DType, shape: list[int],
                   count: int, name: str) -> np.ndarray:
    field = _CONTENTS.get(dtype.kserve)
    if field is None:
        raise InvalidInputError(
            f"{dtype.kserve} values cannot be sent in InferTensorContents; use "
            f"raw_input_contents; input name: {name}"
        )
    values = getattr(contents, field)
    if len(values) != count:
        raise InvalidInputError(
            f"Invalid number of values in tensor - Expected: {count}; Actual: {len(values)}; "
            f"input name: {name}"
        )
    if dtype is tensors.BYTES:
        array = np.empty(count, dtype=object)
        array[:] = list(values)
        return array.reshape(shape)
    try:
        return np.fromiter(values, dtype.numpy, count).reshape(shape)
    except (OverflowError, ValueError):
        raise InvalidInputError(f"Values out of range for {dtype.kserve}; input name: {name}"
                                ) from None


def encode(servable: ModelVersion, outputs: dict[str, np.ndarray], wanted: list[str],
           request_id: str) -> pb.ModelInferResponse:
    response = pb.ModelInferResponse(model_name=servable.name,
                                     model_version=str(servable.version), id=request_id)
    for name in wanted or outputs:
        value = outputs[name]
        response.outputs.add(name=name, datatype=tensors.from_numpy(value.dtype).kserve,
                             shape=value.shape)
        response.raw_output_contents.append(to_binary(value))
    return response


# -- endpoints -----------------------------------------------------------------------------------


def infer(manager: ModelManager, request: pb.ModelInferRequest) -> pb.ModelInferResponse:
    version = parse_version(request.model_version)
    with metrics.track(API, "gRPC", "ModelInfer", request.model_name, version) as track:
        servable = manager.get(request.model_name, version)
        track.version = servable.version
        wanted = [item.name for item in request.outputs]
        for name in wanted:
            if name not in servable.outputs:
                raise InvalidInputError(f"Requested output is not served by the model: {name}")
        outputs = track.infer(servable, decode_inputs(request))
        return encode(servable, outputs, wanted, request.id)


def model_metadata(manager: ModelManager, request: pb.ModelMetadataRequest
                   ) -> pb.ModelMetadataResponse:
    version = parse_version(request.version)
    with metrics.track(API, "gRPC", "ModelMetadata", request.name, version) as track:
        servable = manager.get(request.name, version)
        track.version = servable.version
        doc = rest.kserve_metadata_doc(manager.model(request.name), servable)
        return json_format.ParseDict(doc, pb.ModelMetadataResponse(), descriptor_pool=POOL)


def model_ready(manager: ModelManager, request: pb.ModelReadyRequest) -> pb.ModelReadyResponse:
    """Unknown model or version: NOT_FOUND (as OVMS); known but not AVAILABLE: ready=false."""
    version = parse_version(request.version)
    with metrics.track(API, "gRPC", "ModelReady", request.name, None):
        served = manager.model(request.name)
        if version is not None and version not in served.versions:
            raise VersionNotFoundError(request.name, version)
        try:
            manager.get(request.name, version)
        except ServingError:
            return pb.ModelReadyResponse(ready=False)
        return pb.ModelReadyResponse(ready=True)


def server_metadata() -> pb.ServerMetadataResponse:
    return pb.ServerMetadataResponse(name=rest.SERVER_NAME, version=rest.SERVER_VERSION)


def server_ready(manager: ModelManager) -> pb.ServerReadyResponse:
    return pb.ServerReadyResponse(ready=manager.ready)


def server_live() -> pb.ServerLiveResponse:
    return pb.ServerLiveResponse(live=True)
