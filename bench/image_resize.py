"""The jpeg path: bytes -> the 1x3x224x224 float32 tensor a classifier takes, with the OpenCV
INTER_LINEAR resize of core/codecs/images.py against the Pillow BILINEAR resize it replaced,
in alternating blocks of one run (their ratio is what to read).

    python -m bench.image_resize [COUNT]    # needs the dev extras (scikit-image's photos)
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import skimage
from PIL import Image

from bench.common import paired
from core.codecs import images
from core.tensors import dtypes
from core.tensors.spec import TensorSpec

SPEC = TensorSpec("input", dtypes.from_ov("f32"), ((1, 1), (3, 3), (224, 224), (224, 224)), "NCHW")


def pillow_bilinear(data: bytes) -> np.ndarray:
    """The replaced path: Pillow decode, BILINEAR (antialiased) resize, BGR, NCHW float32."""
    with Image.open(io.BytesIO(data)) as image:
        rgb = image.convert("RGB").resize((224, 224), Image.Resampling.BILINEAR)
    bgr = np.asarray(rgb)[:, :, ::-1]
    return np.ascontiguousarray(bgr.transpose(2, 0, 1)[None], dtype=np.float32)


def jpegs() -> dict[str, bytes]:
    """A 640x427 photo (downscaled) and a 160x107 one (upscaled)."""
    photo = (Path(skimage.__file__).parent / "data" / "rocket.jpg").read_bytes()
    small = io.BytesIO()
    with Image.open(io.BytesIO(photo)) as image:
        image.resize((160, 107)).save(small, format="JPEG", quality=90)
    return {"640x427 -> 224x224": photo, "160x107 -> 224x224": small.getvalue()}


def main(count: int) -> None:
    print("| jpeg | OpenCV-exact p50 ms | Pillow BILINEAR p50 ms | ratio |")
    print("|---|---:|---:|---:|")
    for label, data in jpegs().items():
        batch = np.array([data], dtype=object)
        new, old = paired(
            lambda b=batch: images.decode_batch(b, SPEC), lambda d=data: pillow_bilinear(d), count
        )
        print(
            f"| {label} | {new['p50_ms']:.2f} | {old['p50_ms']:.2f} | "
            f"{new['p50_ms'] / old['p50_ms']:.2f} |"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 500)
