"""Binary tensor buffers shared by KServe REST (the binary-data extension) and KServe gRPC
(raw_input_contents / raw_output_contents): fixed-size elements as raw little-endian bytes read
with np.frombuffer, without a copy; BYTES elements each behind a 4-byte little-endian length.
"""

from __future__ import annotations

import struct

import numpy as np

from core.errors import InvalidInputError
from core.tensors import dtypes


def split_body(body: bytes, header_length: str | None) -> tuple[bytes, memoryview]:
    """(JSON header, binary tensors); the tensors stay a view of the body (no copy)."""
    if header_length is None:
        return body, memoryview(b"")
    text = header_length.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 18) or int(text) > len(body):
        raise InvalidInputError(
            "Inference-Header-Content-Length header is invalid and couldn't be parsed"
        )
    cut = int(text)
    return body[:cut], memoryview(body)[cut:]


class BinaryReader:
    """The binary part of a KServe REST body, read input by input (binary_data_size)."""

    def __init__(self, data: memoryview) -> None:
        self.view = data
        self.offset = 0

    @property
    def remaining(self) -> int:
        return len(self.view) - self.offset

    def take(self, size: int) -> memoryview:
        if self.offset + size > len(self.view):
            raise InvalidInputError(
                "Received buffer size is smaller than binary_data_size parameter indicates"
            )
        chunk = self.view[self.offset : self.offset + size]
        self.offset += size
        return chunk


def from_binary(
    chunk: memoryview, dtype: dtypes.DType, shape: list[int], count: int, name: str
) -> np.ndarray:
    """One input's buffer -> an array of `shape` (a view of `chunk` for fixed-size dtypes)."""
    if dtype is dtypes.BYTES:
        return _split_bytes(chunk, count, name).reshape(shape)
    expected = count * dtype.numpy.itemsize
    if len(chunk) != expected:
        raise InvalidInputError(
            f"Invalid content size of tensor proto - Expected: {expected} bytes; "
            f"Actual: {len(chunk)} bytes; input name: {name}"
        )
    return np.frombuffer(chunk, dtype=dtype.numpy).reshape(shape)


def _split_bytes(chunk: memoryview, count: int, name: str) -> np.ndarray:
    if count * 4 > len(chunk):  # every element has a 4-byte length: refuse before allocating
        raise InvalidInputError(
            f"Invalid BYTES framing for input {name}: {count} elements need at least "
            f"{count * 4} bytes; got {len(chunk)}"
        )
    items = np.empty(count, dtype=object)
    offset = 0
    for i in range(count):
        if offset + 4 > len(chunk):
            raise InvalidInputError(f"Invalid BYTES framing for input {name}")
        (length,) = struct.unpack_from("<I", chunk, offset)
        offset += 4
        if offset + length > len(chunk):
            raise InvalidInputError(f"Invalid BYTES framing for input {name}")
        items[i] = bytes(chunk[offset : offset + length])
        offset += length
    if offset != len(chunk):
        raise InvalidInputError(f"Invalid BYTES framing for input {name}: trailing bytes")
    return items


def to_binary(value: np.ndarray) -> bytes:
    """One output array -> its buffer (BYTES elements length-prefixed)."""
    if dtypes.is_strings(value):
        parts = []
        for item in value.reshape(-1):
            raw = item if isinstance(item, bytes) else str(item).encode("utf-8")
            parts.append(struct.pack("<I", len(raw)) + raw)
        return b"".join(parts)
    return np.ascontiguousarray(value).tobytes()
