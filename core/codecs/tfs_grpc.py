"""TF Serving gRPC converters: TensorProto <-> numpy, and the Predict / GetModelMetadata /
GetModelStatus messages, as OVMS answers them.

Inputs arrive in `tensor_content` (read with np.frombuffer, no copy) or in the typed `*_val`
fields; jpeg/png images arrive as DT_STRING `string_val`, one image per element (decoded by
core.codecs.images, called by the data plane). The value count must match the shape exactly,
as in OVMS. Outputs go back in `tensor_content` (DT_STRING outputs in `string_val`). Metadata
and status are the REST documents of core.codecs.documents parsed into the protos, so the two
fronts cannot drift.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from google.protobuf import json_format

from core.codecs.binary import from_binary
from core.codecs.documents import Named, Signed
from core.errors import InvalidInputError, VersionNotFoundError
from core.tensors import dtypes
from core.tensors.limits import DEFAULT as DEFAULT_LIMITS
from core.tensors.limits import Limits, check_shape
from core.tensors.spec import Inputs
from protos.gen.tensorflow.core.framework import tensor_pb2, types_pb2
from protos.gen.tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_pb2,
    predict_pb2,
)
from protos.pool import POOL

SEQUENCE_ID = "sequence_id"  # core.serving.stateful.SEQUENCE_ID (not imported: keeps openvino lazy)

# Which typed field carries the values of each DataType (as TensorFlow's tensor_util fills them).
_TYPED_FIELD = {
    "DT_FLOAT": "float_val",
    "DT_DOUBLE": "double_val",
    "DT_HALF": "half_val",
    "DT_INT8": "int_val",
    "DT_INT16": "int_val",
    "DT_INT32": "int_val",
    "DT_UINT8": "int_val",
    "DT_UINT16": "int_val",
    "DT_INT64": "int64_val",
    "DT_UINT32": "uint32_val",
    "DT_UINT64": "uint64_val",
    "DT_BOOL": "bool_val",
}


# -- tensors -------------------------------------------------------------------------------------


def to_numpy(
    proto: tensor_pb2.TensorProto, name: str, limits: Limits = DEFAULT_LIMITS
) -> np.ndarray:
    """One request TensorProto -> an array (read-only view of tensor_content when present)."""
    dtype = dtypes.BY_TF_ENUM.get(proto.dtype)
    if dtype is None:
        raise InvalidInputError(
            f"Invalid input precision - Unsupported: {_dtype_name(proto.dtype)}; input name: {name}"
        )
    if proto.tensor_shape.unknown_rank:
        raise InvalidInputError(f"Tensor shape must be known; input name: {name}")
    shape = [dim.size for dim in proto.tensor_shape.dim]
    count = check_shape(limits, shape, name, dtype.numpy.itemsize)
    if dtype is dtypes.BYTES:
        values = proto.string_val
        if not values and count:
            raise InvalidInputError(f"String val is empty; input name: {name}")
        _check_count(count, len(values), name)
        array = np.empty(count, dtype=object)
        array[:] = list(values)
        return array.reshape(shape)
    if proto.tensor_content:
        return from_binary(memoryview(proto.tensor_content), dtype, shape, count, name)
    values = getattr(proto, _TYPED_FIELD[dtype.tf])
    _check_count(count, len(values), name)
    try:
        if dtype.tf == "DT_HALF":  # half_val holds the IEEE fp16 bit patterns as int32
            return np.fromiter(values, np.uint16, count).view(np.float16).reshape(shape)
        return np.fromiter(values, dtype.numpy, count).reshape(shape)
    except (OverflowError, ValueError):
        raise InvalidInputError(f"Values out of range for {dtype.tf}; input name: {name}") from None


def _check_count(expected: int, actual: int, name: str) -> None:
    if expected != actual:
        raise InvalidInputError(
            f"Invalid number of values in tensor proto container - Expected: {expected}; "
            f"Actual: {actual}; input name: {name}"
        )


def _dtype_name(value: int) -> str:
    try:
        return types_pb2.DataType.Name(value)
    except ValueError:
        return str(value)


def fill_proto(array: np.ndarray, proto: tensor_pb2.TensorProto) -> None:
    """An output array -> `proto` (tensor_content; string_val for bytes)."""
    dtype = dtypes.from_numpy(array.dtype)
    proto.dtype = dtype.tf_enum  # type: ignore[assignment]
    for size in array.shape:
        proto.tensor_shape.dim.add(size=size)
    if dtype is dtypes.BYTES:
        proto.string_val.extend(
            item if isinstance(item, bytes) else str(item).encode() for item in array.flat
        )
    else:
        proto.tensor_content = array.tobytes()


def decode_inputs(request: predict_pb2.PredictRequest, limits: Limits = DEFAULT_LIMITS) -> Inputs:
    return {name: to_numpy(proto, name, limits) for name, proto in request.inputs.items()}


def model_spec(spec: model_pb2.ModelSpec) -> tuple[str, int | None]:
    """(name, version); version 0 or unset means the default version, as in OVMS."""
    if not spec.HasField("version"):
        return spec.name, None
    number = spec.version.value
    if number < 0:
        raise VersionNotFoundError(spec.name, number)
    return spec.name, number or None


def require_spec(
    request: get_model_metadata_pb2.GetModelMetadataRequest
    | get_model_status_pb2.GetModelStatusRequest,
) -> tuple[str, int | None]:
    if not request.HasField("model_spec"):
        raise InvalidInputError("model_spec missing")
    return model_spec(request.model_spec)


def check_filter(wanted: Iterable[str], served: Mapping[str, object]) -> list[str]:
    """The output_filter's names, each one an output the servable serves, named once (TF
    Serving's rule: a reply holds each output once)."""
    names = list(wanted)
    for index, name in enumerate(names):
        if name not in served:
            raise InvalidInputError(f"output_filter names an unknown output: {name}")
        if name in names[:index]:
            raise InvalidInputError(f"duplicate output tensor alias: {name}")
    return names


def predict_response(
    servable: Named, outputs: Mapping[str, np.ndarray], wanted: list[str]
) -> predict_pb2.PredictResponse:
    """The outputs named in `wanted` (every output when empty) as a PredictResponse."""
    response = predict_pb2.PredictResponse()
    response.model_spec.name = servable.name
    response.model_spec.version.value = servable.version
    for out_name in wanted or outputs:
        value = outputs[out_name]
        if out_name == SEQUENCE_ID and value.dtype == np.uint64:
            _fill_sequence_id(value, response.outputs[out_name])
        else:
            fill_proto(value, response.outputs[out_name])
    return response


def _fill_sequence_id(value: np.ndarray, proto: tensor_pb2.TensorProto) -> None:
    """A stateful model's echoed id goes in uint64_val, where OVMS's clients read it
    (`response.outputs["sequence_id"].uint64_val[0]`)."""
    proto.dtype = types_pb2.DT_UINT64
    for size in value.shape:
        proto.tensor_shape.dim.add(size=size)
    proto.uint64_val.extend(int(v) for v in value.flat)


def check_metadata_field(request: get_model_metadata_pb2.GetModelMetadataRequest) -> None:
    if list(request.metadata_field) != ["signature_def"]:
        raise InvalidInputError("Invalid signature name")


def metadata_response(doc: dict[str, Any]) -> get_model_metadata_pb2.GetModelMetadataResponse:
    """core.codecs.documents.tfs_metadata as its proto."""
    return json_format.ParseDict(
        doc, get_model_metadata_pb2.GetModelMetadataResponse(), descriptor_pool=POOL
    )


def status_response(doc: dict[str, Any]) -> get_model_status_pb2.GetModelStatusResponse:
    """core.codecs.documents.model_status as its proto."""
    return json_format.ParseDict(
        doc, get_model_status_pb2.GetModelStatusResponse(), descriptor_pool=POOL
    )


class PredictCall:
    """One gRPC Predict for the data plane: decodes the TensorProtos and answers with the
    outputs the output_filter names (all when empty)."""

    def __init__(self, request: predict_pb2.PredictRequest) -> None:
        self.request = request
        self.wanted: list[str] = []

    def decode(self, servable: Signed, limits: Limits) -> Inputs:
        self.wanted = check_filter(self.request.output_filter, servable.outputs)
        return decode_inputs(self.request, limits)

    def encode(
        self, servable: Named, outputs: Mapping[str, np.ndarray]
    ) -> predict_pb2.PredictResponse:
        return predict_response(servable, outputs, self.wanted)
