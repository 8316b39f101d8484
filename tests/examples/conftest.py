"""The OCR example's repository (built once from the rapidocr-onnxruntime wheel), an
in-process App over it, and text rendered with Pillow: each line's text and where it was
drawn."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import pytest
from PIL import Image, ImageDraw, ImageFont

from core.api import App
from examples.ocr import build as ocr
from tests.core.serving.pipeline.helpers import app_for

# Debian fonts-wqy-microhei (the font Pillow's default cannot draw CJK with)
CJK_FONTS = (
    Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc"),
    Path("/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc"),
)


@dataclass(frozen=True)
class Line:
    text: str
    box: tuple[int, int, int, int]  # x1, y1, x2, y2 of the drawn glyphs


@dataclass(frozen=True)
class Rendered:
    data: bytes
    lines: tuple[Line, ...]
    size: tuple[int, int]


def render(
    lines: list[str],
    size: int = 40,
    canvas: tuple[int, int] = (640, 480),
    background: tuple[int, int, int] = (236, 232, 222),
    ink: tuple[int, int, int] = (30, 30, 40),
    fmt: str = "JPEG",
    font: ImageFont.FreeTypeFont | None = None,
    left: int = 20,
) -> Rendered:
    """Lines drawn top-down, two line heights apart."""
    image = Image.new("RGB", canvas, background)
    draw = ImageDraw.Draw(image)
    face = font or ImageFont.load_default(size=size)
    drawn = []
    for row, text in enumerate(lines):
        at = (left, 20 + row * 2 * size)
        draw.text(at, text, fill=ink, font=face)
        x1, y1, x2, y2 = draw.textbbox(at, text, font=face)
        drawn.append(Line(text, (int(x1), int(y1), int(x2), int(y2))))
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **({"quality": 92} if fmt == "JPEG" else {}))
    return Rendered(buffer.getvalue(), tuple(drawn), canvas)


def cjk_font(size: int) -> ImageFont.FreeTypeFont:
    for path in CJK_FONTS:
        if path.is_file():
            return ImageFont.truetype(str(path), size)
    pytest.skip(
        "no CJK font: Pillow's default font has no Chinese glyphs; "
        "apt-get install fonts-wqy-microhei"
    )


@pytest.fixture(scope="session")
def ocr_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        ocr.models_dir()
    except ocr.WheelMissing as exc:
        pytest.skip(f"{exc} (make setup installs it)")
    root = tmp_path_factory.mktemp("ocr")
    ocr.build(root)
    return root


@pytest.fixture(scope="session")
def ocr_app(ocr_root: Path, tmp_path_factory: pytest.TempPathFactory) -> App:
    app = app_for(ocr_root / "config.json", tmp_path_factory.mktemp("ocr-cache"))
    assert app.manager.pipeline_errors == {}
    return app
