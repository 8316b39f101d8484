"""jpeg/png tensors -> the model's image input (layout, size, precision), as OVMS does.

OVMS decodes with OpenCV, so channels come out BGR by default; `color_format: RGB` in the
model config switches. Pillow is imported on the first image only (cold start).
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import numpy as np

from core import limits
from core.errors import ImageDecodeError, InvalidInputError

if TYPE_CHECKING:
    from PIL import Image

    from core.signature import TensorSpec



def decode_batch(items: np.ndarray, spec: TensorSpec, color_format: str = "BGR") -> np.ndarray:
    """A 1-D object array of encoded images -> one N,H,W,C or N,C,H,W array."""
    if items.ndim != 1 or items.size == 0:
        raise InvalidInputError(
            f"Binary image input must be a 1-D batch of images; input name: {spec.name}"
        )
    layout = spec.image_layout or "NHWC"
    height, width, channels = (spec.dims[1], spec.dims[2], spec.dims[3]) if layout == "NHWC" \
        else (spec.dims[2], spec.dims[3], spec.dims[1])
    decoded = [
        _decode_one(item, spec.name, channels[1], height, width, color_format) for item in items
    ]
    if len({image.shape for image in decoded}) > 1:
        raise InvalidInputError(
            "Binary input images for this endpoint are required to have the same resolution; "
            f"input name: {spec.name}"
        )
    batch = np.stack(decoded)
    if layout == "NCHW":
        batch = batch.transpose(0, 3, 1, 2)
    return np.ascontiguousarray(batch, dtype=spec.dtype.numpy)


def _decode_one(
    data: object,
    name: str,
    channels: int,
    height: tuple[int, int],
    width: tuple[int, int],
    color_format: str,
) -> np.ndarray:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise InvalidInputError(f"Binary image input must be bytes; input name: {name}")
    from PIL import Image, UnidentifiedImageError

    max_pixels = limits.current().max_image_pixels
    Image.MAX_IMAGE_PIXELS = max_pixels
    try:
        with Image.open(io.BytesIO(bytes(data))) as image:
            if image.format not in ("JPEG", "PNG"):
                raise ImageDecodeError(f"Image parsing failed - format {image.format} is not "
                                       f"jpeg or png; input name: {name}")
            if image.width * image.height > max_pixels:
                raise ImageDecodeError(
                    f"Image parsing failed - {image.width}x{image.height} pixels exceed the "
                    f"limit of {max_pixels} pixels; input name: {name}")
            converted = _resize(image.convert("L" if channels == 1 else "RGB"), height, width)
            array = np.asarray(converted)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise ImageDecodeError(f"Image parsing failed - the image exceeds the limit of "
                               f"{max_pixels} pixels; input name: {name}") from None
    except UnidentifiedImageError:
        raise ImageDecodeError(f"Image parsing failed - not a jpeg or png image; "
                               f"input name: {name}") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise ImageDecodeError(f"Image parsing failed - {exc}; input name: {name}") from None
    if channels == 1:
        array = array[:, :, None]
    elif color_format == "BGR":
        array = array[:, :, ::-1]
    if channels not in (-1, array.shape[2]):
        raise InvalidInputError(f"Invalid number of channels in binary input - Expected: "
                                f"{channels}; "
                                f"Actual: {array.shape[2]}; input name: {name}")
    return array


def _resize(image: Image.Image, height: tuple[int, int], width: tuple[int, int]) -> Image.Image:
    """Resize to a static H/W; clamp into a range; leave a fully dynamic dim alone."""
    from PIL import Image

    target_w = _target(width, image.width)
    target_h = _target(height, image.height)
    if (target_w, target_h) == image.size:
        return image
    return image.resize((target_w, target_h), Image.Resampling.BILINEAR)


def _target(dim: tuple[int, int], size: int) -> int:
    low, high = dim
    if low == -1:
        return size
    return min(max(size, low), high)
