"""A compiled model's ports as a version serves them: each port's served name and TensorSpec,
inputs as InferRequest.infer takes them, and outputs read back by served name."""

from __future__ import annotations

from typing import Any

import numpy as np
import openvino as ov

from core.tensors import dtypes
from core.tensors.shapes import ANY, Dim, Dims
from core.tensors.spec import TensorSpec


def ov_input(array: np.ndarray) -> np.ndarray:
    """A validated input as InferRequest.infer takes it (string tensors as numpy bytes)."""
    return dtypes.to_ov_strings(array) if dtypes.is_strings(array) else array


def read_outputs(
    request: ov.InferRequest, results: Any, names: list[str], specs: dict[str, TensorSpec]
) -> dict[str, np.ndarray]:
    """The outputs of one inference by served name. String outputs are read as raw bytes
    (the bindings' default decodes them to str, replacing bytes that are not UTF-8)."""
    outputs: dict[str, np.ndarray] = {}
    for index, (name, value) in enumerate(zip(names, results.to_tuple(), strict=True)):
        if specs[name].dtype is dtypes.BYTES:
            value = _strings(request.get_output_tensor(index))
        outputs[name] = np.asarray(value)
    return outputs


def _strings(tensor: ov.Tensor) -> np.ndarray:
    """A string output as an object array of bytes. OpenVINO's Tensor.bytes_data (2026.4)
    misreads two cases: no elements (the process dies of SIGFPE) and every element empty (one
    stale byte of memory per element, an earlier request's data). Its str_data tells the
    empty ones apart; bytes_data stays the reader otherwise (str_data replaces non-UTF-8)."""
    if tensor.get_size() == 0:
        return np.empty(tuple(tensor.get_shape()), dtype=object)
    data = tensor.bytes_data
    if data.dtype.itemsize == 1 and not any(text for text in tensor.str_data.flat):
        return np.full(data.shape, b"", dtype=object)
    return dtypes.as_bytes_array(data)


def port_name(port: ov.Output) -> str:
    """The tensor name a port is known by (its node's name when it has none)."""
    names = port.get_names()
    if names:
        return str(port.get_any_name())
    return str(port.get_node().get_friendly_name())


def spec(name: str, port: ov.Output) -> TensorSpec:
    """The port served as `name`: dtype, dims (ranges for dynamic ones) and layout."""
    shape = port.get_partial_shape()
    dims: Dims = tuple(_dim(d) for d in shape) if shape.rank.is_static else (ANY,)
    layout = ""
    node = port.get_node()
    if hasattr(node, "get_layout"):
        layout = _layout_text(node.get_layout())
    return TensorSpec(name, dtypes.from_ov(port.get_element_type().get_type_name()), dims, layout)


def dynamic(dim: Dim) -> bool:
    """Does the dimension take more than one size?"""
    return dim == ANY or dim[0] != dim[1]


def _dim(dim: ov.Dimension) -> Dim:
    if dim.is_static:
        return (dim.get_length(), dim.get_length())
    low, high = dim.get_min_length(), dim.get_max_length()
    return ANY if high == -1 else (max(low, 1), high)


def _layout_text(layout: ov.Layout) -> str:
    text = layout.to_string().strip("[]").replace(",", "")
    return text if text.isalpha() else ""
