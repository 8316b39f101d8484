"""jpeg/png inputs, as OVMS takes them: TFS {"b64": ...} and KServe BYTES (binary framing with a
4-byte little-endian length per element), decoded to BGR (OpenCV's order), resized to the
model's H x W, batched. Expected numbers come from OpenCV (what OVMS runs: imdecode, conversion
to the model's float precision, cv::resize INTER_LINEAR) and OpenVINO directly."""

from __future__ import annotations

import io

import cv2
import numpy as np
import pytest
import tritonclient.http as triton
from PIL import Image

from core.codecs import images
from core.errors import InvalidInputError
from core.tensors import dtypes
from core.tensors.limits import Limits
from core.tensors.shapes import ANY
from core.tensors.spec import TensorSpec
from tests.core.helpers import (
    RunningServer,
    Zoo,
    b64,
    bytes_framing,
    error_of,
    kserve_binary_request,
    reference,
)


def encode(seed: int, size: tuple[int, int], kind: str) -> bytes:
    """A photo-like (smooth plus noise) RGB image of `size` (w, h) as jpeg or png bytes."""
    rng = np.random.default_rng(seed)
    w, h = size
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 / w, yy * 255 / h, (xx + yy) * 127 / (w + h)], axis=-1)
    pixels = np.clip(base + rng.normal(0, 20, (h, w, 3)), 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buffer, format=kind)
    return buffer.getvalue()


JPEG = encode(1, (300, 260), "JPEG")  # downscaled to 224x224
PNG = encode(2, (160, 120), "PNG")  # upscaled
BIG_JPEG = encode(3, (640, 480), "JPEG")  # more than twice the model size


def expected_pixels(images: list[bytes], layout: str) -> np.ndarray:
    """What the model must receive, as OVMS computes it: OpenCV decode (BGR), float32, then
    cv::resize INTER_LINEAR to 224x224."""
    arrays = []
    for data in images:
        bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
        arrays.append(
            cv2.resize(bgr.astype(np.float32), (224, 224), interpolation=cv2.INTER_LINEAR)
        )
    batch = np.stack(arrays)
    return batch if layout == "NHWC" else batch.transpose(0, 3, 1, 2).copy()


MODELS = {"classifier": "NCHW", "classifier_dyn": "NCHW", "classifier_nhwc": "NHWC"}


def expected(zoo: Zoo, name: str, images: list[bytes]) -> np.ndarray:
    pixels = expected_pixels(images, MODELS[name])
    return reference(getattr(zoo, name), {"input": pixels})["probabilities"]


def check(got: object, want: np.ndarray) -> None:
    array = np.asarray(got, dtype=np.float32).reshape(want.shape)
    assert np.allclose(array, want, rtol=1e-5)


@pytest.mark.parametrize("image", [JPEG, PNG, BIG_JPEG], ids=["jpeg", "png", "big-jpeg"])
@pytest.mark.parametrize("name", ["classifier", "classifier_nhwc"])
def test_tfs_b64_row(zoo: Zoo, zoo_server: RunningServer, name: str, image: bytes) -> None:
    response = zoo_server.post(f"/v1/models/{name}:predict", {"instances": [b64(image)]})
    assert response.status_code == 200, response.text
    check(response.json()["predictions"], expected(zoo, name, [image]))


def test_channel_order_is_bgr_like_opencv(zoo: Zoo, zoo_server: RunningServer) -> None:
    response = zoo_server.post("/v1/models/classifier_nhwc:predict", {"instances": [b64(JPEG)]})
    got = np.asarray(response.json()["predictions"], dtype=np.float32)
    bgr = expected_pixels([JPEG], "NHWC")
    as_rgb = reference(zoo.classifier_nhwc, {"input": bgr[..., ::-1].copy()})["probabilities"]
    assert np.allclose(got, expected(zoo, "classifier_nhwc", [JPEG]), rtol=1e-5)
    assert not np.allclose(got, as_rgb, rtol=1e-3)


@pytest.mark.parametrize("name", ["classifier_dyn", "classifier_nhwc"])
def test_tfs_b64_batch_of_two(zoo: Zoo, zoo_server: RunningServer, name: str) -> None:
    images = [JPEG, PNG]
    for body in (
        {"inputs": {"input": [b64(i) for i in images]}},
        {"instances": [{"input": b64(i)} for i in images]},
    ):
        response = zoo_server.post(f"/v1/models/{name}:predict", body)
        assert response.status_code == 200, response.text
        doc = response.json()
        check(doc.get("outputs", doc.get("predictions")), expected(zoo, name, images))


@pytest.mark.parametrize("name", ["classifier_dyn", "classifier_nhwc"])
def test_kserve_bytes_binary_batch(zoo: Zoo, zoo_server: RunningServer, name: str) -> None:
    images = [PNG, JPEG]
    payload = bytes_framing(images)
    doc = {
        "inputs": [
            {
                "name": "input",
                "shape": [2],
                "datatype": "BYTES",
                "parameters": {"binary_data_size": len(payload)},
            }
        ]
    }
    data, headers = kserve_binary_request(doc, payload)
    response = zoo_server.post(f"/v2/models/{name}/infer", data=data, headers=headers)
    assert response.status_code == 200, response.text
    (output,) = response.json()["outputs"]
    assert output["shape"] == [2, 1000]
    check(output["data"], expected(zoo, name, images))


def test_kserve_bytes_single_input_without_binary_data_size(
    zoo: Zoo, zoo_server: RunningServer
) -> None:
    """binary_data_size may be omitted for a single input: the rest of the body is its data."""
    payload = bytes_framing([JPEG])
    doc = {"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES"}]}
    data, headers = kserve_binary_request(doc, payload)
    response = zoo_server.post("/v2/models/classifier/infer", data=data, headers=headers)
    assert response.status_code == 200, response.text
    check(response.json()["outputs"][0]["data"], expected(zoo, "classifier", [JPEG]))


def test_tritonclient_bytes_images(zoo: Zoo, zoo_server: RunningServer) -> None:
    client = triton.InferenceServerClient(f"127.0.0.1:{zoo_server.port}")
    tensor = triton.InferInput("input", [2], "BYTES")
    tensor.set_data_from_numpy(np.array([JPEG, BIG_JPEG], dtype=np.object_), binary_data=True)
    result = client.infer("classifier_nhwc", [tensor])
    check(result.as_numpy("probabilities"), expected(zoo, "classifier_nhwc", [JPEG, BIG_JPEG]))


# -- failures ----------------------------------------------------------------------------------


def _good(server: RunningServer) -> None:
    response = server.post("/v1/models/classifier:predict", {"instances": [b64(PNG)]})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    "payload", [b"definitely not an image", JPEG[: len(JPEG) // 3], b"GIF89a" + b"\x00" * 40]
)
def test_broken_image_is_400(zoo_server: RunningServer, payload: bytes) -> None:
    response = zoo_server.post("/v1/models/classifier:predict", {"instances": [b64(payload)]})
    assert response.status_code == 400, response.text
    assert error_of(response).startswith("Image parsing failed")
    _good(zoo_server)


def test_broken_image_in_kserve_bytes_is_400(zoo_server: RunningServer) -> None:
    payload = bytes_framing([b"\x89PNG\r\n\x1a\n broken"])
    doc = {
        "inputs": [
            {
                "name": "input",
                "shape": [1],
                "datatype": "BYTES",
                "parameters": {"binary_data_size": len(payload)},
            }
        ]
    }
    data, headers = kserve_binary_request(doc, payload)
    response = zoo_server.post("/v2/models/classifier/infer", data=data, headers=headers)
    assert response.status_code == 400, response.text
    assert error_of(response).startswith("Image parsing failed")
    _good(zoo_server)


@pytest.mark.parametrize(
    ("shape", "items", "message"),
    [
        (
            [1, 1],
            [PNG],
            "Invalid number of shape dimensions - Expected number of input shape dimensions: "
            "1; Actual: 2; input name: input",
        ),
        ([0], [], "Invalid input batch size - Expected: 1; Actual: 0; input name: input"),
    ],
    ids=["2-D", "no-image"],
)
def test_kserve_bytes_image_shape_errors_are_ovms(
    zoo_server: RunningServer, shape: list[int], items: list[bytes], message: str
) -> None:
    payload = bytes_framing(items)
    doc = {
        "inputs": [
            {
                "name": "input",
                "shape": shape,
                "datatype": "BYTES",
                "parameters": {"binary_data_size": len(payload)},
            }
        ]
    }
    data, headers = kserve_binary_request(doc, payload)
    response = zoo_server.post("/v2/models/classifier/infer", data=data, headers=headers)
    assert response.status_code == 400, response.text
    assert error_of(response) == message
    _good(zoo_server)


@pytest.mark.parametrize("text", ["%%% not base64 %%%", "abc", "YW Jj"])
def test_not_base64_is_400(zoo_server: RunningServer, text: str) -> None:
    response = zoo_server.post("/v1/models/classifier:predict", {"instances": [{"b64": text}]})
    assert response.status_code == 400, response.text
    assert error_of(response) == "Decode Base64 to string error"
    _good(zoo_server)


def test_image_to_a_model_without_image_layout_is_400(zoo_server: RunningServer) -> None:
    response = zoo_server.post("/v1/models/scaler:predict", {"instances": [b64(PNG)]})
    assert response.status_code == 400, response.text
    assert error_of(response).startswith(
        "Received binary image input but resource not configured to accept NHWC layout"
    )
    _good(zoo_server)


def test_batch_of_two_to_a_batch_one_model_is_400(zoo_server: RunningServer) -> None:
    response = zoo_server.post(
        "/v1/models/classifier:predict", {"instances": [b64(PNG), b64(JPEG)]}
    )
    assert response.status_code == 400, response.text
    assert error_of(response).startswith("Invalid input batch size - Expected: 1; Actual: 2")
    _good(zoo_server)


def test_batch_for_any_image_size_is_held_to_the_limit_from_its_first_image() -> None:
    """A model taking any H x W: 50 pngs of 160x120 make a 50x120x160x3 float batch (11.5
    MB), refused from the first image's size against a 1 MiB limit; an image of another
    size than the first is refused as OVMS refuses it."""
    spec = TensorSpec("img", dtypes.BY_KSERVE["FP32"], (ANY, ANY, ANY, (3, 3)), "NHWC")
    items = np.empty(50, dtype=object)
    items[:] = [PNG] * 50
    limit = "Input img of 11520000 bytes exceeds the limit of 1048576 bytes"
    with pytest.raises(InvalidInputError, match=limit):
        images.decode_batch(items, spec, limits=Limits(max_tensor_bytes=1 << 20))
    assert images.decode_batch(items[:2], spec).shape == (2, 120, 160, 3)
    items[1] = JPEG
    with pytest.raises(InvalidInputError, match="required to have the same resolution"):
        images.decode_batch(items, spec)
