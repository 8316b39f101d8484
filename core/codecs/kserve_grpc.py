"""KServe v2 gRPC (inference.GRPCInferenceService) converters: ModelInfer and metadata messages.

Input buffers come in `raw_input_contents` (one per input, read with np.frombuffer without a
copy; BYTES elements carry a 4-byte little-endian length prefix) or in the typed `contents`,
never both (OVMS INVALID_MESSAGE_STRUCTURE). Outputs go back in `raw_output_contents`, which is
what tritonclient reads. Metadata is core.codecs.documents' KServe document as its proto.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from google.protobuf import json_format

from core.codecs.binary import from_binary, to_binary
from core.codecs.documents import Named, Signed
from core.errors import InvalidInputError
from core.tensors import dtypes
from core.tensors.limits import DEFAULT as DEFAULT_LIMITS
from core.tensors.limits import Limits, check_shape
from core.tensors.spec import Inputs
from protos.gen.kserve import grpc_predict_v2_pb2 as pb
from protos.pool import POOL

_CONTENTS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def parse_version(text: str) -> int | None:
    """ "" and "0" mean the default version; anything but ASCII digits is rejected (str.isdigit
    alone takes "²", which int() refuses, and "١", which int() reads as 1)."""
    if not text:
        return None
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise InvalidInputError(f"Model version is invalid format: {text[:20]}")
    return int(text) or None


# -- tensors -------------------------------------------------------------------------------------


def decode_inputs(request: pb.ModelInferRequest, limits: Limits = DEFAULT_LIMITS) -> Inputs:
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
        dtype = dtypes.from_kserve(tensor.datatype)
        shape = list(tensor.shape)
        count = check_shape(limits, shape, name, dtype.numpy.itemsize)
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


def _from_contents(
    contents: pb.InferTensorContents, dtype: dtypes.DType, shape: list[int], count: int, name: str
) -> np.ndarray:
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
    if dtype is dtypes.BYTES:
        array = np.empty(count, dtype=object)
        array[:] = list(values)
        return array.reshape(shape)
    try:
        return np.fromiter(values, dtype.numpy, count).reshape(shape)
    except (OverflowError, ValueError):
        raise InvalidInputError(
            f"Values out of range for {dtype.kserve}; input name: {name}"
        ) from None


def encode(
    servable: Named, outputs: Mapping[str, np.ndarray], wanted: list[str], request_id: str
) -> pb.ModelInferResponse:
    """The outputs named in `wanted` (every output when empty) as a ModelInferResponse."""
    response = pb.ModelInferResponse(
        model_name=servable.name, model_version=str(servable.version), id=request_id
    )
    for name in wanted or outputs:
        value = outputs[name]
        response.outputs.add(
            name=name, datatype=dtypes.from_numpy(value.dtype).kserve, shape=value.shape
        )
        response.raw_output_contents.append(to_binary(value))
    return response


def requested_outputs(request: pb.ModelInferRequest, served: Mapping[str, object]) -> list[str]:
    """The names of the outputs the request asks for, each one an output the servable serves,
    asked for once (as Triton answers; each repeat would put another copy in the reply)."""
    wanted = [item.name for item in request.outputs]
    for index, name in enumerate(wanted):
        if name not in served:
            raise InvalidInputError(f"Requested output is not served by the model: {name}")
        if name in wanted[:index]:
            raise InvalidInputError(f"output '{name}' already requested")
    return wanted


def metadata_response(doc: dict[str, Any]) -> pb.ModelMetadataResponse:
    """core.codecs.documents.kserve_metadata as its proto."""
    return json_format.ParseDict(doc, pb.ModelMetadataResponse(), descriptor_pool=POOL)


class InferCall:
    """One gRPC ModelInfer for the data plane: decodes the tensors and answers with the outputs
    the request names (all when none)."""

    def __init__(self, request: pb.ModelInferRequest) -> None:
        self.request = request
        self.wanted: list[str] = []

    def decode(self, servable: Signed, limits: Limits) -> Inputs:
        self.wanted = requested_outputs(self.request, servable.outputs)
        return decode_inputs(self.request, limits)

    def encode(self, servable: Named, outputs: Mapping[str, np.ndarray]) -> pb.ModelInferResponse:
        return encode(servable, outputs, self.wanted, self.request.id)
