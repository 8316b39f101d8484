"""jpeg/png tensors -> the model's image input (layout, size, precision), as OVMS does.

OVMS decodes with OpenCV, so channels come out BGR by default; `color_format: RGB` in the
model config switches. Like OVMS, pixels are converted to the model's precision first and then
resized with OpenCV's INTER_LINEAR rule (half-pixel centres, two taps per axis, no
antialiasing), computed here with numpy: bit for bit OpenCV's fixed-point path for a u8 model,
in floats otherwise. A 1- or 3-channel input gets that many channels when
the image converts without loss (grey to colour, an opaque alpha dropped); otherwise the request
fails with OVMS's "Invalid number of channels in binary input". Pillow is imported on the first
image only (cold start).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from core.errors import ImageDecodeError, InvalidInputError
from core.tensors import dtypes
from core.tensors.limits import DEFAULT as DEFAULT_LIMITS
from core.tensors.limits import Limits, check_shape
from core.tensors.shapes import format_dims
from core.tensors.spec import precision_name

if TYPE_CHECKING:
    from PIL import Image

    from core.tensors.spec import Inputs, TensorSpec

_GREY_MODES = frozenset({"1", "L", "LA", "La"})
# MPO: a jpeg with a multi-picture index (many phone and camera photos), read as its first
# picture, as OpenCV reads it
_FORMATS = frozenset({"JPEG", "MPO", "PNG"})
# the precisions OVMS converts images to (OpenCV's depths); others answer "Invalid input precision"
_IMAGE_PRECISIONS = frozenset({"UINT8", "INT8", "UINT16", "INT16", "INT32", "FP16", "FP32", "FP64"})


def decode_inputs(
    specs: Mapping[str, TensorSpec],
    inputs: Inputs,
    color_format: str = "BGR",
    limits: Limits = DEFAULT_LIMITS,
) -> Inputs:
    """`inputs` with every batch of encoded images sent to a numeric input decoded to that
    input's layout, size and precision; other inputs pass through untouched. The decoded
    batch is held to `limits` before it is built (a few bytes of png become ~600 KB each)."""
    decoded = dict(inputs)
    for name, array in inputs.items():
        spec = specs.get(name)
        if spec is None or array.dtype != object or spec.dtype is dtypes.BYTES:
            continue
        if spec.image_layout is None:
            raise InvalidInputError(
                "Received binary image input but resource not configured to accept "
                f"NHWC layout; input name: {name}"
            )
        decoded[name] = decode_batch(array, spec, color_format, limits)
    return decoded


def decode_batch(
    items: np.ndarray,
    spec: TensorSpec,
    color_format: str = "BGR",
    limits: Limits = DEFAULT_LIMITS,
) -> np.ndarray:
    """A 1-D object array of encoded images -> one N,H,W,C or N,C,H,W array. The first image
    sets the batch's size where H or W is a range or -1 (the others must then match it along
    a -1 dim, or are resized). The batch's size is checked against `limits` from the model's
    dims when they are static, else from the first image, before the rest are decoded."""
    if items.ndim != 1:
        raise InvalidInputError(
            "Invalid number of shape dimensions - Expected number of input shape dimensions: "
            f"1; Actual: {items.ndim}; input name: {spec.name}"
        )
    layout = spec.image_layout or "NHWC"
    if items.size == 0:
        expected = format_dims((spec.dims[0],))[1:-1]
        raise InvalidInputError(
            f"Invalid input batch size - Expected: {expected}; Actual: 0; input name: {spec.name}"
        )
    height, width, channels = (
        (spec.dims[1], spec.dims[2], spec.dims[3])
        if layout == "NHWC"
        else (spec.dims[2], spec.dims[3], spec.dims[1])
    )
    if spec.dtype.kserve not in _IMAGE_PRECISIONS:
        raise InvalidInputError(
            f"Invalid input precision - binary image input cannot be converted to "
            f"{precision_name(spec.dtype)}; input name: {spec.name}"
        )
    dtype = np.dtype(spec.dtype.numpy)
    static = all(low == high != -1 for low, high in (height, width, channels))
    if static:  # checked once, before any image is decoded
        _check_batch(limits, len(items), (height[0], width[0], channels[0]), spec, dtype)
    decoded: list[np.ndarray] = []
    for item in items:
        pixels = _decode_one(item, spec.name, channels[1], limits.max_image_pixels)
        if not decoded:
            # the first image sets the size (within a range, or its own for -1) and the
            # channels (for -1) of the whole batch, as in OVMS
            size = (_target(height, pixels.shape[0]), _target(width, pixels.shape[1]))
            if not static:
                _check_batch(limits, len(items), (*size, pixels.shape[2]), spec, dtype)
        else:
            _check_like_first(pixels, decoded[0], (height, width), spec.name)
        decoded.append(_bgr(_resize(pixels, size, dtype), color_format))
    batch = np.stack(decoded)
    if layout == "NCHW":
        batch = batch.transpose(0, 3, 1, 2)
    return np.ascontiguousarray(_cast(batch, dtype))


def _check_batch(
    limits: Limits, count: int, image: tuple[int, ...], spec: TensorSpec, dtype: np.dtype
) -> None:
    """`count` images of `image` (H,W,C) within the limits, as the decoded input's shape."""
    height, width, channels = image
    layout = spec.image_layout or "NHWC"
    shape = (
        [count, height, width, channels] if layout == "NHWC" else [count, channels, height, width]
    )
    check_shape(limits, shape, spec.name, dtype.itemsize)


def _check_like_first(
    pixels: np.ndarray, first: np.ndarray, dims: tuple[tuple[int, int], ...], name: str
) -> None:
    """A later image of a batch: the first one's channels, and its size along any -1 dim
    (a static or ranged dim is resized to)."""
    if pixels.shape[2] != first.shape[2]:
        raise _channels_error(first.shape[2], str(pixels.shape[2]), name)
    for axis, (low, _) in enumerate(dims):
        if low == -1 and pixels.shape[axis] != first.shape[axis]:
            raise InvalidInputError(
                "Binary input images for this endpoint are required to have the same "
                f"resolution; input name: {name}"
            )


def _decode_one(data: object, name: str, channels: int, max_pixels: int) -> np.ndarray:
    """Encoded bytes -> an H,W,C uint8 RGB(A) array with the channels the model asks for."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise InvalidInputError(f"Binary image input must be bytes; input name: {name}")
    from PIL import Image, UnidentifiedImageError

    # max_pixels is checked here, per App; Pillow's own bomb check (a process-wide setting,
    # left as it is) refuses what is far over its default before the header is even kept
    try:
        with Image.open(io.BytesIO(bytes(data))) as image:
            if image.format not in _FORMATS:
                raise ImageDecodeError(
                    f"Image parsing failed - format {image.format} is not "
                    f"jpeg or png; input name: {name}"
                )
            if image.width * image.height > max_pixels:
                raise ImageDecodeError(
                    f"Image parsing failed - {image.width}x{image.height} pixels exceed the "
                    f"limit of {max_pixels} pixels; input name: {name}"
                )
            array = _channels(image, channels, name)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise ImageDecodeError(
            f"Image parsing failed - the image exceeds the limit of "
            f"{max_pixels} pixels; input name: {name}"
        ) from None
    except UnidentifiedImageError:
        raise ImageDecodeError(
            f"Image parsing failed - not a jpeg or png image; input name: {name}"
        ) from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise ImageDecodeError(f"Image parsing failed - {exc}; input name: {name}") from None
    return array


def _bgr(pixels: np.ndarray, color_format: str) -> np.ndarray:
    """RGB(A) -> BGR(A), OpenCV's order, unless the model config asks for RGB."""
    if pixels.shape[2] < 3 or color_format != "BGR":
        return pixels
    order = [2, 1, 0, *range(3, pixels.shape[2])]
    return pixels[:, :, order]


def _channels(image: Image.Image, channels: int, name: str) -> np.ndarray:
    """The image's pixels with `channels` channels (-1: the image's own, as OpenCV decodes
    them), or a channels error when that would lose information."""
    if _sixteen_bit(image):
        raise _channels_error(channels, "16-bit samples", name)
    if image.mode == "CMYK":
        return _match(_cmyk_to_rgb(image), channels, name)
    base = "L" if image.mode in _GREY_MODES else "RGB"
    if image.has_transparency_data:
        pixels = np.asarray(image.convert("RGBA"))
        if channels == -1 or channels == 4:
            return pixels
        if not (pixels[:, :, 3] == 255).all():
            raise _channels_error(channels, "4 (an alpha channel that is not opaque)", name)
        pixels = pixels[:, :, :3] if base == "RGB" else pixels[:, :, :1]
    else:
        pixels = np.asarray(image if image.mode == base else image.convert(base))
        if pixels.ndim == 2:
            pixels = pixels[:, :, None]
    return _match(pixels, channels, name)


def _cmyk_to_rgb(image: Image.Image) -> np.ndarray:
    """A CMYK jpeg's RGB by OpenCV's integer rule, k - (255 - c) * k >> 8, on the samples
    libjpeg gives, which are inverted in Adobe files (Pillow un-inverts them); Pillow's own
    rule differs by 1 or 2. One channel at a time in 16 bits, to hold memory near the RGB
    path's."""
    tiles = getattr(image, "tile", ())
    inverted = any(tile.args and tile.args[0] == "CMYK;I" for tile in tiles)
    black = np.asarray(image.getchannel(3)).astype(np.uint16)
    if inverted:
        np.subtract(255, black, out=black)
    rgb = np.empty((image.height, image.width, 3), np.uint8)
    for channel in range(3):
        # 255 - libjpeg's sample: Pillow's sample itself when inverted
        product = np.asarray(image.getchannel(channel)).astype(np.uint16)
        if not inverted:
            np.subtract(255, product, out=product)
        product *= black  # at most 255 * 255: fits in 16 bits
        product >>= 8
        np.subtract(black, product, out=product)
        rgb[:, :, channel] = product
    return rgb


def _match(pixels: np.ndarray, channels: int, name: str) -> np.ndarray:
    """Grey to colour by repeating it; colour to grey only when every pixel is grey."""
    have = pixels.shape[2]
    if channels in (-1, have):
        return pixels
    if have == 1 and channels == 3:
        return np.repeat(pixels, 3, axis=2)
    if have == 3 and channels == 1 and (pixels == pixels[:, :, :1]).all():
        return pixels[:, :, :1]
    raise _channels_error(channels, str(have), name)


def _sixteen_bit(image: Image.Image) -> bool:
    """16-bit (or wider) samples, which Pillow would silently cut to 8 bits."""
    if image.mode.startswith(("I", "F")):
        return True
    return any(";16" in str(tile.args) for tile in getattr(image, "tile", ()))


def _channels_error(channels: int, actual: str, name: str) -> InvalidInputError:
    return InvalidInputError(
        f"Invalid number of channels in binary input - Expected: "
        f"{channels}; Actual: {actual}; input name: {name}"
    )


def _target(dim: tuple[int, int], size: int) -> int:
    """A static dim, a size clamped into a range, or the image's own size for -1."""
    low, high = dim
    if low == -1:
        return size
    return min(max(size, low), high)


def _work_type(dtype: np.dtype) -> type[np.floating]:
    return np.float64 if dtype == np.float64 else np.float32


def _cast(batch: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Float pixels -> the model's precision; integers round half up and saturate, as
    OpenCV's saturate_cast."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        batch = np.clip(np.floor(batch + 0.5), info.min, info.max)
    return batch.astype(dtype, copy=False)


def _resize(pixels: np.ndarray, size: tuple[int, int], dtype: np.dtype) -> np.ndarray:
    """Resized as OVMS resizes after converting to the model's precision: OpenCV's 8-bit
    fixed-point path for a u8 model, floats otherwise."""
    if dtype == np.uint8:
        return resize_linear_u8(pixels, *size)
    return resize_linear(pixels, *size, _work_type(dtype))


def resize_linear_u8(pixels: np.ndarray, height: int, width: int) -> np.ndarray:
    """An H,W,C uint8 array resized bit for bit as cv::resize(..., INTER_LINEAR) resizes 8-bit
    images: 11-bit weights from single-precision positions, columns first, then rows with
    OpenCV's shifts and rounding. Only the source rows that are used are read."""
    if pixels.shape[:2] == (height, width):
        return pixels
    first_col, second_col, left, right = _taps_u8(pixels.shape[1], width, clamp=True)
    first_row, second_row, top, bottom = _taps_u8(pixels.shape[0], height, clamp=False)

    def columns(rows: np.ndarray) -> np.ndarray:
        picked = pixels[rows]
        out = picked[:, first_col].astype(np.int32)
        out *= left[:, None]
        out += picked[:, second_col].astype(np.int32) * right[:, None]
        out >>= 4
        return out

    upper = columns(first_row)
    upper *= top[:, None, None]
    upper >>= 16
    lower = columns(second_row)
    lower *= bottom[:, None, None]
    lower >>= 16
    upper += lower
    upper += 2
    upper >>= 2
    return np.clip(upper, 0, 255).astype(np.uint8)


@lru_cache(maxsize=64)
def _taps_u8(source: int, target: int, clamp: bool) -> tuple[np.ndarray, ...]:
    """OpenCV's 8-bit taps along one axis: the two source indices and their weights out of
    2048. Columns (`clamp`) past a border take the border pixel whole; rows keep their
    weights on the clamped border row, as OpenCV does."""
    position = ((np.arange(target) + 0.5) * (1.0 / (target / source)) - 0.5).astype(np.float32)
    first = np.floor(position).astype(np.int64)
    weight = position - first.astype(np.float32)
    if clamp:
        outside = (first < 0) | (first >= source - 1)
        weight[outside] = 0.0
        first = np.clip(first, 0, source - 1)
    one = np.float32(2048)
    before = np.rint((np.float32(1) - weight) * one).astype(np.int32)
    after = np.rint(weight * one).astype(np.int32)
    if clamp:
        before[outside] = 2048
    second = np.clip(first + 1, 0, source - 1)
    return np.clip(first, 0, source - 1), second, before, after


def resize_linear(
    pixels: np.ndarray, height: int, width: int, work: type[np.floating] = np.float32
) -> np.ndarray:
    """An H,W,C array resized as OpenCV's cv::resize(..., INTER_LINEAR), in `work` precision.

    The two passes commute, so the one that leaves fewer pixels for the second goes first."""
    if pixels.shape[:2] == (height, width):
        return pixels.astype(work)
    if height * pixels.shape[1] <= pixels.shape[0] * width:
        return _along(_along(pixels, height, 0, work), width, 1, work)
    return _along(_along(pixels, width, 1, work), height, 0, work)


def _along(pixels: np.ndarray, size: int, axis: int, work: type[np.floating]) -> np.ndarray:
    """Linear interpolation along one axis (0: rows, 1: columns) to `size` samples."""
    first, second, weight = _taps(pixels.shape[axis], size)
    low = pixels.take(first, axis=axis).astype(work, copy=False)
    high = pixels.take(second, axis=axis).astype(work, copy=False)
    shape = [1, 1, 1]
    shape[axis] = size
    high -= low  # low + (high - low) * weight, in place: fewer temporaries
    high *= weight.astype(work).reshape(shape)
    high += low
    return high


@lru_cache(maxsize=64)
def _taps(source: int, target: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each output index along one axis: the two source indices and the weight of the
    second, from half-pixel centres, clamped at the borders as OpenCV does."""
    position = (np.arange(target) + 0.5) * (source / target) - 0.5
    first = np.floor(position).astype(np.int64)
    weight = position - first
    weight[first < 0] = 0.0
    first = np.maximum(first, 0)
    last = first >= source - 1
    weight[last] = 0.0
    first[last] = source - 1
    second = np.minimum(first + 1, source - 1)
    return first, second, weight
