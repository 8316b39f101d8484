"""KServe v2 REST infer: JSON tensors and the binary-data extension.

Binary extension: the JSON header is the first `Inference-Header-Content-Length` bytes; each
input with `parameters.binary_data_size` takes the next that many bytes (BYTES elements carry
a 4-byte little-endian length prefix). Fixed-size binary inputs are read with np.frombuffer,
without a copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.codecs.binary import BinaryReader, from_binary, split_body, to_binary
from core.codecs.documents import Named, Signed
from core.codecs.fast_json import (
    brackets,
    fast_numeric,
    is_array,
    is_object,
    members,
    plain,
    with_document,
)
from core.codecs.json import (
    cast_numbers,
    dumps,
    flatten,
    json_tensor,
    loads,
)
from core.errors import InvalidInputError
from core.tensors import dtypes
from core.tensors.limits import DEFAULT as DEFAULT_LIMITS
from core.tensors.limits import Limits, check_shape
from core.tensors.spec import Inputs, TensorSpec, check_precision

BAD_ID = "Could not parse input content. Not valid ndarray detected"  # OVMS's text for it
BAD_PARAMETERS = "Could not parse request parameters"


@dataclass
class InferRequest:
    inputs: Inputs
    id: str | None = None
    binary_outputs: dict[str, bool] = field(default_factory=dict)  # requested outputs
    binary_default: bool = False


def decode(
    body: bytes,
    header_length: str | None,
    specs: Mapping[str, TensorSpec],
    limits: Limits = DEFAULT_LIMITS,
) -> InferRequest:
    json_part, binary = split_body(body, header_length)
    doc = with_document(json_part, lambda parsed: _fast(parsed, json_part))
    if doc is None:
        doc = loads(json_part)
    if not isinstance(doc, dict):
        raise InvalidInputError("Invalid JSON structure. 'inputs' must be a list of tensors")
    request_id, params = _id(doc), _parameters(doc)  # checked before the inputs, as OVMS does
    if not isinstance(doc.get("inputs"), list):
        raise InvalidInputError("Invalid JSON structure. 'inputs' must be a list of tensors")
    reader = BinaryReader(binary)
    inputs: Inputs = {}
    for index, item in enumerate(doc["inputs"]):
        name, array = _tensor(item, index, reader, specs, limits, len(doc["inputs"]) == 1)
        if name in inputs:
            raise InvalidInputError(f"Duplicated input name: {name}")
        inputs[name] = array
    if reader.offset != len(binary):
        raise InvalidInputError(
            "Binary data is longer than the binary_data_size parameters of the inputs declare"
        )
    request = InferRequest(inputs, request_id)
    request.binary_default = params.get("binary_data_output") is True
    outputs = doc.get("outputs") or []
    if not isinstance(outputs, list):
        raise InvalidInputError("Invalid JSON structure. 'outputs' must be a list")
    for item in outputs:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise InvalidInputError("Invalid JSON structure. Each output needs a name")
        out_params = _parameters(item)
        # only JSON true asks for binary, as for binary_data_output: bool("false") is True
        request.binary_outputs[item["name"]] = (
            out_params.get("binary_data", request.binary_default) is True
        )
    return request


def _fast(doc: Any, text: bytes) -> dict[str, Any] | None:
    """The request document with each numeric "data" already an array of the declared
    datatype (see core.codecs.fast_json), or None: then the exact (orjson) path decodes it."""
    fields = members(doc) if is_object(doc) else None
    if fields is None or not is_array(fields.get("inputs")):
        return None
    out: dict[str, Any] = {}
    expected = 1  # the "inputs" list itself
    for key, value in fields.items():
        expected += key.count("[")
        if key != "inputs":
            out[key], count = plain(value)
            expected += count
    items = []
    for item in fields["inputs"]:
        entry = _fast_tensor(item)
        if entry is None:
            return None
        items.append(entry[0])
        expected += entry[1]
    if brackets(text) != expected:
        return None
    out["inputs"] = items
    return out


def _fast_tensor(item: Any) -> tuple[dict[str, Any], int] | None:
    """One input object with numeric "data" as an array, and the '[' it accounts for."""
    fields = members(item) if is_object(item) else None
    if fields is None:
        return None
    entry: dict[str, Any] = {}
    expected = 0
    for key, value in fields.items():
        expected += key.count("[")
        if key != "data":
            entry[key], count = plain(value)
            expected += count
    if "data" in fields:
        datatype = entry.get("datatype")
        dtype = dtypes.BY_KSERVE.get(datatype) if isinstance(datatype, str) else None
        if dtype is None or dtype is dtypes.BYTES:
            return None
        found = fast_numeric(fields["data"], dtype.numpy)
        if found is None:
            return None
        entry["data"], count = found
        expected += count
    return entry, expected


def _id(doc: dict[str, Any]) -> str | None:
    """The request's "id", echoed in the response; OVMS refuses one that is not a string."""
    if "id" not in doc:
        return None
    if not isinstance(doc["id"], str):
        raise InvalidInputError(BAD_ID)
    return doc["id"]


def _parameters(owner: dict[str, Any]) -> dict[str, Any]:
    """The "parameters" of the request, an input or an output: an object of scalars (the
    protocol's $parameter: string, number or boolean), as OVMS checks them."""
    if "parameters" not in owner:
        return {}
    params = owner["parameters"]
    if not isinstance(params, dict) or not all(
        isinstance(value, str | int | float) for value in params.values()
    ):
        raise InvalidInputError(BAD_PARAMETERS)
    return params


def _tensor(
    item: Any,
    index: int,
    reader: BinaryReader,
    specs: Mapping[str, TensorSpec],
    limits: Limits,
    single: bool = False,
) -> tuple[str, np.ndarray]:
    if not isinstance(item, dict):
        raise InvalidInputError(f"Invalid JSON structure. inputs[{index}] must be an object")
    name, shape, datatype = item.get("name"), item.get("shape"), item.get("datatype")
    if not isinstance(name, str) or not isinstance(shape, list) or not isinstance(datatype, str):
        raise InvalidInputError(
            f"Invalid JSON structure. inputs[{index}] needs name, shape and datatype"
        )
    dtype = dtypes.from_kserve(datatype)
    count = check_shape(limits, shape, name, dtype.numpy.itemsize)
    spec = specs.get(name)
    if spec is not None and not (dtype is dtypes.BYTES and spec.image_layout):
        check_precision(spec, dtype)
    size = _parameters(item).get("binary_data_size")
    if size is None and "data" not in item and reader.remaining:
        # OVMS: binary_data_size may be left out for a single input (it takes the rest of the
        # body) or for a fixed-size datatype (its size follows from the shape).
        if dtype is not dtypes.BYTES:
            size = min(count * dtype.numpy.itemsize, reader.remaining)
        elif single:
            size = reader.remaining
    if size is not None:
        if "data" in item:
            raise InvalidInputError(
                "Request contains values both in binary data and in content value"
            )
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InvalidInputError(
                f"binary_data_size parameter is invalid and cannot be parsed; input name: {name}"
            )
        return name, from_binary(reader.take(size), dtype, shape, count, name)
    if "data" not in item:
        raise InvalidInputError(f"Input {name} has neither data nor binary_data_size")
    return name, _from_json(item["data"], dtype, shape, count, name)


def _from_json(
    data: Any, dtype: dtypes.DType, shape: list[int], count: int, name: str
) -> np.ndarray:
    if dtype is dtypes.BYTES:
        flat = flatten(data)
        if not all(isinstance(x, str) for x in flat):
            raise InvalidInputError(f"BYTES input {name} takes strings")
        array = np.empty(len(flat), dtype=object)
        array[:] = [x.encode("utf-8") for x in flat]
    else:
        try:
            array = np.asarray(data)
        except (ValueError, TypeError):
            raise InvalidInputError(f"Invalid data for input {name}: not a valid array") from None
        if array.dtype.kind not in "biuf":
            raise InvalidInputError(f"Invalid data for input {name}: expected numbers")
        array = cast_numbers(data, array, dtype.numpy, name).reshape(-1)
    if array.size != count:
        raise InvalidInputError(
            f"Invalid number of values in tensor proto container - Expected: {count}; "
            f"Actual: {array.size}; "
            f"input name: {name}"
        )
    return array.reshape(shape)


def encode(
    model: str, version: int, outputs: Mapping[str, np.ndarray], request: InferRequest
) -> tuple[bytes, dict[str, str]]:
    """The JSON response (+ binary part when any output is asked for as binary)."""
    wanted = request.binary_outputs or {name: request.binary_default for name in outputs}
    unknown = sorted(set(wanted) - set(outputs))
    if unknown:
        raise InvalidInputError(f"Requested output is not served by the model: {unknown[0]}")
    described: list[dict[str, Any]] = []
    chunks: list[bytes] = []
    for name, binary in wanted.items():
        value = outputs[name]
        entry: dict[str, Any] = {
            "name": name,
            "datatype": dtypes.from_numpy(value.dtype).kserve,
            "shape": list(value.shape),
        }
        if binary:
            data = to_binary(value)
            entry["parameters"] = {"binary_data_size": len(data)}
            chunks.append(data)
        else:
            entry["data"] = json_tensor(value.reshape(-1))
        described.append(entry)
    doc: dict[str, Any] = {"model_name": model, "model_version": str(version), "outputs": described}
    if request.id is not None:
        doc["id"] = request.id
    header = dumps(doc)
    if not chunks:
        return header, {"content-type": "application/json"}
    return header + b"".join(chunks), {
        "content-type": "application/octet-stream",
        "inference-header-content-length": str(len(header)),
    }


class InferCall:
    """One REST infer for the data plane: decodes the body (JSON, optionally followed by binary
    tensors) against the servable's inputs and answers as the request asked."""

    def __init__(self, body: bytes, header_length: str | None) -> None:
        self.body = body
        self.header_length = header_length
        self.request = InferRequest({})

    def decode(self, servable: Signed, limits: Limits) -> Inputs:
        self.request = decode(self.body, self.header_length, servable.inputs, limits)
        return self.request.inputs

    def encode(
        self, servable: Named, outputs: Mapping[str, np.ndarray]
    ) -> tuple[bytes, dict[str, str]]:
        return encode(servable.name, servable.version, outputs, self.request)
