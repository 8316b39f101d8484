"""The pixels a model receives from a jpeg/png, compared with what OVMS computes with OpenCV
(imdecode, conversion to the model's precision, cv::resize INTER_LINEAR), on real photos from
scikit-image's data. Echo models return their input, so the reply is what the model saw."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
import skimage
from PIL import Image

from tests.core.helpers import (
    RunningServer,
    b64,
    bytes_framing,
    error_of,
    kserve_binary_request,
    save_ir,
    write_config,
)

PHOTOS = Path(skimage.__file__).parent / "data"
CHANNELS_ERROR = "Invalid number of channels in binary input"
UP = (400, 600)  # chelsea (300x451) and camera (512x512) both grow in at least one axis

ECHOES = {
    "echo_rgb": ([1, 64, 64, 3], ov.Type.u8),
    "echo_grey": ([1, 64, 64, 1], ov.Type.u8),
    "echo_any": ([1, 64, 64, -1], ov.Type.u8),
    "echo_up": ([1, *UP, 3], ov.Type.f32),
    "echo_batch": ("[2,16..64,16..64,?]", ov.Type.u8),
    "echo_bool": ([1, 64, 64, 3], ov.Type.boolean),
    "echo_i64": ([1, 64, 64, 3], ov.Type.i64),
    "echo_i16": ([1, 64, 64, 3], ov.Type.i16),
    "echo_unlaid": ("[1,?,?,?]", ov.Type.u8),  # no layout: OVMS's default N... applies
}


def echo(shape: list[int] | str, element: ov.Type, layout: str = "NHWC") -> ov.Model:
    image = ops.parameter(ov.PartialShape(shape), element, name="image")
    if layout:
        image.set_layout(ov.Layout(layout))
    pixels = ops.convert(image, ov.Type.f32)
    pixels.output(0).get_tensor().set_names({"pixels"})
    return ov.Model([pixels], [image], "echo")


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, server_factory: Callable[..., RunningServer]
) -> RunningServer:
    root = tmp_path_factory.mktemp("echo")
    for name, (shape, element) in ECHOES.items():
        layout = "" if name == "echo_unlaid" else "NHWC"
        save_ir(echo(shape, element, layout), root / name / "1")
    config = write_config(
        root / "config.json", [{"name": name, "base_path": name} for name in ECHOES]
    )
    return server_factory(config)


def photo(name: str) -> bytes:
    return (PHOTOS / name).read_bytes()


def png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def opencv(data: bytes, size: tuple[int, int], dtype: type = np.uint8) -> np.ndarray:
    """OVMS's pixels: decoded unchanged (BGR), converted to the model's precision, resized."""
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED).astype(dtype)
    resized = cv2.resize(image, (size[1], size[0]), interpolation=cv2.INTER_LINEAR)
    return resized if resized.ndim == 3 else resized[:, :, None]


def received(server: RunningServer, model: str, data: bytes) -> np.ndarray:
    response = server.post(f"/v1/models/{model}:predict", {"instances": [b64(data)]})
    assert response.status_code == 200, response.text
    return np.asarray(response.json()["predictions"][0], dtype=np.float32)


def refused(server: RunningServer, model: str, data: bytes) -> str:
    response = server.post(f"/v1/models/{model}:predict", {"instances": [b64(data)]})
    assert response.status_code == 400, response.text
    return error_of(response)


# -- resize --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["chelsea.png", "astronaut.png", "coffee.png", "rocket.jpg", "retina.jpg"]
)
def test_downscale_is_opencv_inter_linear(server: RunningServer, name: str) -> None:
    data = photo(name)
    assert np.array_equal(received(server, "echo_rgb", data), opencv(data, (64, 64)))


def test_downscale_of_a_grey_photo(server: RunningServer) -> None:
    data = photo("camera.png")
    assert np.array_equal(received(server, "echo_grey", data), opencv(data, (64, 64)))


@pytest.mark.parametrize("name", ["chelsea.png", "camera.png", "hubble_deep_field.jpg"])
def test_upscale_is_opencv_inter_linear(server: RunningServer, name: str) -> None:
    """A float model: OVMS converts to float before resizing, so nothing is rounded."""
    data = photo(name)
    want = opencv(data, UP, np.float32)
    if want.shape[2] == 1:  # a grey photo for a 3-channel model: the grey, three times
        want = np.repeat(want, 3, axis=2)
    assert np.abs(received(server, "echo_up", data) - want).max() <= 0.01


@pytest.mark.parametrize(
    "size",
    [(224, 224), (37, 913), (1, 1), (256, 256), (1025, 1536)],
    ids=lambda size: f"{size[0]}x{size[1]}",
)
@pytest.mark.parametrize("name", ["astronaut.png", "camera.png", "rocket.jpg"])
def test_resize_linear_matches_cv2_float_and_8_bit(name: str, size: tuple[int, int]) -> None:
    """Odd sizes, a single pixel, an exact half (OpenCV switches to INTER_AREA there: the same
    average) and more than twice the size, straight on the function."""
    from core.codecs.images import resize_linear, resize_linear_u8

    pixels = cv2.imdecode(np.frombuffer(photo(name), np.uint8), cv2.IMREAD_UNCHANGED)
    pixels = pixels if pixels.ndim == 3 else pixels[:, :, None]
    got = resize_linear(pixels, *size)
    want = cv2.resize(pixels.astype(np.float32), size[::-1], interpolation=cv2.INTER_LINEAR)
    assert np.abs(got - want.reshape(got.shape)).max() < 1e-3
    eight_bit = cv2.resize(pixels, size[::-1], interpolation=cv2.INTER_LINEAR)
    assert np.array_equal(resize_linear_u8(pixels, *size), eight_bit.reshape(got.shape))


def test_batch_for_a_size_range_takes_the_first_images_size(server: RunningServer) -> None:
    """H and W are ranges: the first image in range sets the size, as OVMS does, and the
    others are resized to it."""
    rng = np.random.default_rng(3)
    first, second = png(rng.integers(0, 256, (40, 50, 3), np.uint8)), photo("chelsea.png")
    response = server.post(
        "/v1/models/echo_batch:predict", {"instances": [b64(first), b64(second)]}
    )
    assert response.status_code == 200, response.text
    got = np.asarray(response.json()["predictions"], dtype=np.float32)
    assert got.shape == (2, 40, 50, 3)
    assert np.array_equal(got[0], opencv(first, (40, 50)))
    assert np.array_equal(got[1], opencv(second, (40, 50)))


def test_cmyk_jpeg_colours_are_opencvs(server: RunningServer) -> None:
    """OpenCV turns CMYK into BGR with its own integer rule; Pillow's rule differs by 1-2."""
    cmyk = np.random.default_rng(4).integers(0, 256, (64, 64, 4), np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(cmyk, "CMYK").save(buffer, format="JPEG", quality=95)
    data = buffer.getvalue()
    assert np.array_equal(received(server, "echo_rgb", data), opencv(data, (64, 64)))


@pytest.mark.parametrize(("model", "precision"), [("echo_bool", "BOOL"), ("echo_i64", "I64")])
def test_image_to_a_precision_opencv_lacks_is_refused(
    server: RunningServer, model: str, precision: str
) -> None:
    """OVMS converts images only to OpenCV's depths (u8, i8, u16, i16, i32, f16, f32, f64)."""
    message = refused(server, model, photo("chelsea.png"))
    assert message.startswith("Invalid input precision") and precision in message, message


def test_image_to_an_int16_model_is_converted(server: RunningServer) -> None:
    data = photo("chelsea.png")
    got = received(server, "echo_i16", data)
    assert np.abs(got - opencv(data, (64, 64), np.int16)).max() <= 1


def test_cmyk_jpeg_decodes_in_bounded_memory() -> None:
    """A 64 M pixel CMYK jpeg is a few KB: its conversion must stay near the RGB path's
    memory (6 bytes a pixel here), not grow to 16-bit or 32-bit copies of all four channels
    (40 bytes a pixel, 2.4 GB at the default pixel limit)."""
    import tracemalloc

    from core.codecs.images import decode_batch
    from core.tensors import dtypes
    from core.tensors.spec import TensorSpec

    side = 2000
    buffer = io.BytesIO()
    Image.new("CMYK", (side, side), (10, 20, 30, 40)).save(buffer, format="JPEG")
    items = np.empty(1, dtype=object)
    items[0] = buffer.getvalue()
    spec = TensorSpec("image", dtypes.BY_KSERVE["UINT8"], ((1, 1), (64, 64), (64, 64), (3, 3)))
    tracemalloc.start()
    try:
        decode_batch(items, spec)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak / side**2 < 12


def test_multi_picture_jpeg_is_its_first_picture(server: RunningServer) -> None:
    """A jpeg with a multi-picture index (MPO: phone and camera photos) is a jpeg to OpenCV,
    which decodes its first picture."""
    rng = np.random.default_rng(5)
    first, second = (Image.fromarray(rng.integers(0, 256, (64, 64, 3), np.uint8)) for _ in "ab")
    buffer = io.BytesIO()
    first.save(buffer, format="MPO", save_all=True, append_images=[second])
    data = buffer.getvalue()
    assert np.array_equal(received(server, "echo_rgb", data), opencv(data, (64, 64)))


def test_any_image_to_a_dynamic_input_without_layout(server: RunningServer) -> None:
    """[1,?,?,?] with no layout: OVMS's default layout N... takes images as NHWC, at their
    own size and channels."""
    data = photo("chelsea.png")
    got = received(server, "echo_unlaid", data)
    want = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    assert np.array_equal(got, want)


def test_bgr_order(server: RunningServer) -> None:
    pixels = np.zeros((64, 64, 3), np.uint8)
    pixels[..., 0] = 200  # red in RGB
    got = received(server, "echo_rgb", png(pixels))
    assert (got[..., 2] == 200).all() and (got[..., :2] == 0).all()


# -- channels ------------------------------------------------------------------------------------


def _astronaut_rgba(alpha: np.ndarray) -> bytes:
    rgb = np.asarray(Image.open(PHOTOS / "astronaut.png").convert("RGB"))
    return png(np.dstack([rgb, alpha]))


def test_opaque_alpha_is_dropped(server: RunningServer) -> None:
    opaque = _astronaut_rgba(np.full((512, 512), 255, np.uint8))
    assert np.array_equal(
        received(server, "echo_rgb", opaque), received(server, "echo_rgb", photo("astronaut.png"))
    )


def test_translucent_alpha_is_refused(server: RunningServer) -> None:
    alpha = np.full((512, 512), 255, np.uint8)
    alpha[0, 0] = 254
    message = refused(server, "echo_rgb", _astronaut_rgba(alpha))
    assert message.startswith(CHANNELS_ERROR + " - Expected: 3; Actual: 4"), message


def test_any_channels_keeps_alpha_like_opencv(server: RunningServer) -> None:
    """A model with C = -1 gets the image's own channels, BGRA for RGBA, as OpenCV decodes."""
    alpha = np.tile(np.arange(512, dtype=np.uint16) // 2, (512, 1)).astype(np.uint8)
    data = _astronaut_rgba(alpha)
    got = received(server, "echo_any", data)
    assert np.array_equal(got, opencv(data, (64, 64)))


def test_colour_photo_to_a_grey_model_is_refused(server: RunningServer) -> None:
    message = refused(server, "echo_grey", photo("chelsea.png"))
    assert message == f"{CHANNELS_ERROR} - Expected: 1; Actual: 3; input name: image"


def test_grey_stored_as_rgb_to_a_grey_model(server: RunningServer) -> None:
    grey = np.asarray(Image.open(PHOTOS / "camera.png"))
    got = received(server, "echo_grey", png(np.dstack([grey] * 3)))
    assert np.array_equal(got, received(server, "echo_grey", photo("camera.png")))


@pytest.mark.parametrize("shape", [(40, 50), (40, 50, 3)], ids=["grey", "rgb"])
def test_16_bit_png_is_refused(server: RunningServer, shape: tuple[int, ...]) -> None:
    deep = np.random.default_rng(0).integers(0, 65535, shape, dtype=np.uint16)
    ok, encoded = cv2.imencode(".png", deep)
    assert ok
    model = "echo_grey" if len(shape) == 2 else "echo_rgb"
    message = refused(server, model, encoded.tobytes())
    assert message.startswith(CHANNELS_ERROR) and "16-bit" in message, message


def test_batch_of_colour_and_grey_to_any_channels_is_a_channels_error(
    server: RunningServer,
) -> None:
    """C = -1: the first image sets the channels, as in OVMS."""
    colour, grey = photo("chelsea.png"), photo("camera.png")
    response = server.post("/v1/models/echo_batch:predict", {"instances": [b64(colour), b64(grey)]})
    assert response.status_code == 400, response.text
    assert error_of(response) == f"{CHANNELS_ERROR} - Expected: 3; Actual: 1; input name: image"


def test_channels_error_over_kserve_binary(server: RunningServer) -> None:
    payload = bytes_framing([photo("chelsea.png")])
    doc = {
        "inputs": [
            {
                "name": "image",
                "shape": [1],
                "datatype": "BYTES",
                "parameters": {"binary_data_size": len(payload)},
            }
        ]
    }
    data, headers = kserve_binary_request(doc, payload)
    response = server.post("/v2/models/echo_grey/infer", data=data, headers=headers)
    assert response.status_code == 400, response.text
    assert error_of(response).startswith(CHANNELS_ERROR)
