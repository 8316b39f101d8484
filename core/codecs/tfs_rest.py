"""TF Serving REST predict: row ("instances") and columnar ("inputs") JSON, as TFS shapes them.

Row requests are answered with "predictions" (one output: the values per instance; several:
a list of {output: value} per instance); columnar with "outputs" (a value or a map).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from core.codecs.documents import Named, Signed
from core.codecs.fast_json import (
    brackets,
    fast_numeric,
    is_array,
    is_object,
    members,
    with_document,
)
from core.codecs.json import (
    bytes_array,
    dumps,
    is_binary_leaf,
    json_tensor,
    loads,
    named_bytes_as_b64,
    numeric_array,
)
from core.errors import InvalidInputError
from core.tensors import dtypes
from core.tensors.limits import Limits
from core.tensors.spec import Inputs, TensorSpec

ROW = "row"
COLUMN = "column"
_ROW_WHERE = "Could not parse instance content"
_COLUMN_WHERE = "Could not parse input content"


def decode(body: bytes, specs: Mapping[str, TensorSpec]) -> tuple[Inputs, str]:
    fast = with_document(body, lambda doc: _fast(doc, body, specs))
    if fast is not None:
        return fast
    doc = loads(body)
    if not isinstance(doc, dict) or (("instances" in doc) == ("inputs" in doc)):
        raise InvalidInputError("Invalid JSON structure. Could not detect row or column format")
    if "instances" in doc:
        return _rows(doc["instances"], specs), ROW
    return _columns(doc["inputs"], specs), COLUMN


def _fast(doc: Any, body: bytes, specs: Mapping[str, TensorSpec]) -> tuple[Inputs, str] | None:
    """Big numeric bodies without Python floats (see core.codecs.fast_json); None: the exact path.

    Covers `{"instances": <numbers>}` and `{"inputs": <numbers>}` for a one-input model,
    `{"inputs": {name: <numbers>, ...}}` and `{"instances": [{name: <numbers>, ...}, ...]}`
    (float inputs), where every array is regular and numeric."""
    if not is_object(doc) or len(doc) != 1:
        return None
    key = next(iter(doc))
    if key not in ("instances", "inputs"):
        return None
    value = doc[key]
    if key == "instances" and is_array(value) and len(value) and is_object(value[0]):
        return _fast_named_rows(value, body, specs)
    if is_array(value):
        if len(specs) != 1:
            return None
        columns = {next(iter(specs)): value}
    elif key == "inputs" and is_object(value) and "b64" not in value:
        named = members(value)
        if named is None:
            return None
        columns = named
    else:
        return None
    inputs: Inputs = {}
    expected = 0
    for name, column in columns.items():
        spec = specs.get(name)
        if spec is None or spec.dtype is dtypes.BYTES:
            return None
        found = fast_numeric(column, spec.dtype.numpy)
        if found is None:
            return None
        inputs[name], arrays = found
        expected += arrays + (name.count("[") if is_object(value) else 0)
    if brackets(body) != expected:
        return None
    return inputs, ROW if key == "instances" else COLUMN


def _fast_named_rows(
    instances: Any, body: bytes, specs: Mapping[str, TensorSpec]
) -> tuple[Inputs, str] | None:
    """`[{name: <numbers>, ...}, ...]` with the same names in the same order in every
    instance, each a regular array of one shape, for float inputs only (an integer input's
    range check spans the whole batch, which the exact path does): the instances stacked."""
    rows = [members(item) if is_object(item) else None for item in instances]
    first = rows[0]
    if first is None or not first or any(row is None or list(row) != list(first) for row in rows):
        return None
    inputs: Inputs = {}
    expected = 1  # the instances list
    for name in first:
        spec = specs.get(name)
        if spec is None or spec.dtype is dtypes.BYTES or spec.dtype.numpy.kind != "f":
            return None
        parts: list[np.ndarray] = []
        for row in rows:
            assert row is not None
            found = fast_numeric(row[name], spec.dtype.numpy)
            if found is None or (parts and found[0].shape != parts[0].shape):
                return None
            parts.append(found[0])
            expected += found[1] + name.count("[")
        inputs[name] = np.stack(parts)
    if brackets(body) != expected:
        return None
    return inputs, ROW


def _rows(instances: Any, specs: Mapping[str, TensorSpec]) -> Inputs:
    if not isinstance(instances, list) or not instances:
        raise InvalidInputError("Invalid JSON structure. Missing instances in row format")
    if all(isinstance(item, dict) and not _is_b64(item) for item in instances):
        names = list(instances[0])
        for item in instances:
            if list(item) != names:
                raise InvalidInputError(
                    "Invalid JSON structure. Each instance must name the same inputs"
                )
        return {
            name: _array([item[name] for item in instances], specs, name, _ROW_WHERE)
            for name in names
        }
    return {_only_input(specs): _array(instances, specs, _only_input(specs), _ROW_WHERE)}


def _columns(inputs: Any, specs: Mapping[str, TensorSpec]) -> Inputs:
    if isinstance(inputs, dict) and not _is_b64(inputs):
        return {name: _array(value, specs, name, _COLUMN_WHERE) for name, value in inputs.items()}
    name = _only_input(specs)
    return {name: _array(inputs, specs, name, _COLUMN_WHERE)}


def _is_b64(item: dict[str, Any]) -> bool:
    return "b64" in item and len(item) == 1


def _only_input(specs: Mapping[str, TensorSpec]) -> str:
    if len(specs) != 1:
        raise InvalidInputError("Inputs inside buffer does not match expected format.")
    return next(iter(specs))


def _array(value: Any, specs: Mapping[str, TensorSpec], name: str, where: str) -> np.ndarray:
    spec = specs.get(name)
    if spec is None:
        # check_names reports unknown names with the OVMS wording; give it a placeholder
        return np.empty(0)
    if is_binary_leaf(value):
        return bytes_array(value, where)
    return numeric_array(value, spec, where)


def encode(outputs: Mapping[str, np.ndarray], form: str) -> bytes:
    outputs = named_bytes_as_b64(outputs)
    if form == COLUMN:
        if len(outputs) == 1:
            return dumps({"outputs": json_tensor(next(iter(outputs.values())))})
        return dumps({"outputs": {name: json_tensor(value) for name, value in outputs.items()}})
    if len(outputs) == 1:
        return dumps({"predictions": json_tensor(next(iter(outputs.values())))})
    batch = {len(value) if value.ndim else 0 for value in outputs.values()}
    if len(batch) != 1 or 0 in batch:
        raise InvalidInputError(
            'Outputs have different batch sizes; use the columnar format ("inputs")'
        )
    rows = [
        {name: json_tensor(value[i]) for name, value in outputs.items()} for i in range(batch.pop())
    ]
    return dumps({"predictions": rows})


class PredictCall:
    """One REST predict for the data plane: decodes the body against the servable's inputs and
    answers in the request's form (row or column)."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.form = ROW

    def decode(self, servable: Signed, limits: Limits) -> Inputs:
        """The JSON path allocates as it parses (the body limit bounds it); the data plane
        checks the decoded arrays against `limits`."""
        inputs, self.form = decode(self.body, servable.inputs)
        return inputs

    def encode(self, servable: Named, outputs: Mapping[str, np.ndarray]) -> bytes:
        return encode(outputs, self.form)
