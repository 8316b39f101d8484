"""Shapes as OVMS writes them: "(1,3,224,224)", -1 for any size, "1:8" for a range, "auto".

A dimension is a (low, high) pair: (n, n) static, (-1, -1) any size, (lo, hi) a range.
"""

from __future__ import annotations

from typing import Any

Dim = tuple[int, int]
Dims = tuple[Dim, ...]
ShapeSpec = None | str | Dims | dict[str, "str | Dims"]  # str is only ever "auto"

ANY: Dim = (-1, -1)
AUTO = "auto"  # compiled static, reloaded to fit a request's batch / shape (runtime.auto_shape)


def parse_dim(value: Any, path: str) -> Dim:
    if isinstance(value, bool):
        raise ValueError(f"{path}: invalid dimension {value!r}")
    if isinstance(value, int):
        if value < -1 or value == 0:
            raise ValueError(f"{path}: dimension must be positive or -1, got {value}")
        return (value, value)
    if isinstance(value, str):
        text = value.strip()
        if text in ("-1", "?"):
            return ANY
        if ":" in text:
            low, _, high = text.partition(":")
            if low.isdigit() and high.isdigit() and 0 < int(low) <= int(high):
                return (int(low), int(high))
        elif text.isdigit() and int(text) > 0:
            return (int(text), int(text))
    raise ValueError(f"{path}: invalid dimension {value!r}; use a number, -1 or a range lo:hi")


def parse_dims(value: Any, path: str) -> Dims:
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in "([" and text[-1:] in ")]":
            text = text[1:-1]
        items: list[Any] = [part for part in text.split(",") if part.strip()]
    elif isinstance(value, list):
        items = value
    else:
        raise ValueError(f'{path}: expected a shape like "(1,3,224,224)", got {value!r}')
    if not items:
        raise ValueError(f"{path}: shape has no dimensions")
    return tuple(parse_dim(item, f"{path}[{i}]") for i, item in enumerate(items))


def parse_shape(value: Any, path: str) -> ShapeSpec:
    if value is None:
        return None
    if value == "auto":
        return "auto"
    if isinstance(value, dict):
        return {
            str(name): "auto" if item == "auto" else parse_dims(item, f"{path}.{name}")
            for name, item in value.items()
        }
    if isinstance(value, str) and value.strip().startswith("{"):
        import orjson

        try:
            return parse_shape(orjson.loads(value), path)
        except orjson.JSONDecodeError:
            raise ValueError(f"{path}: not valid JSON: {value!r}") from None
    return parse_dims(value, path)


def parse_batch(value: Any, path: str) -> Dim | str | None:
    """None: the model's own batch; AUTO; else a dimension (-1 and lo:hi stay dynamic)."""
    if value is None or value == 0 or value == "0":
        return None
    if value == AUTO:
        return AUTO
    return parse_dim(value, path)


def fits(dim: Dim, size: int) -> bool:
    low, high = dim
    return low == -1 or low <= size <= high


def format_dims(dims: Dims) -> str:
    """OVMS message style (src/shape.cpp): (1,3,224,224), -1 for any size, [lo~hi] a range."""
    return "(" + ",".join(_format_dim(d) for d in dims) + ")"


def _format_dim(dim: Dim) -> str:
    low, high = dim
    if low == high:
        return str(low)
    if low == -1:
        return "-1"
    return f"[{low}~{high}]"


def format_actual(shape: tuple[int, ...]) -> str:
    return "(" + ",".join(str(d) for d in shape) + ")"
