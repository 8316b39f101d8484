"""examples/detect_classify end to end: build it, serve it with the real `ov-serverless serve`,
send a jpeg, and compare with the steps done by hand (decode as OVMS does with OpenCV: BGR,
float32, INTER_LINEAR to 224x224, NCHW; detector; crop node; classifier per crop)."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from examples.detect_classify import crop_node
from examples.detect_classify.build import build
from tests.conftest import ServerFactory
from tests.core.helpers import error_of
from tests.core.serving.pipeline.helpers import compiled, run


def _jpeg(bright: list[int], width: int = 320, height: int = 240) -> bytes:
    """An RGB jpeg whose listed quadrants (0 TL, 1 TR, 2 BL, 3 BR) are bright."""
    rng = np.random.default_rng(len(bright))
    pixels = rng.integers(0, 50, (height, width, 3), dtype=np.uint8)
    for index in bright:
        top, left = height // 2 * (index // 2), width // 2 * (index % 2)
        pixels[top : top + height // 2, left : left + width // 2] += np.array(
            [200, 170, 140], dtype=np.uint8
        )
    buffer = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()


def _decode_as_the_server_does(data: bytes) -> np.ndarray:
    """OVMS's OpenCV steps: decode (BGR), float32, INTER_LINEAR to 224x224, NCHW."""
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    resized = cv2.resize(bgr.astype(np.float32), (224, 224), interpolation=cv2.INTER_LINEAR)
    return np.ascontiguousarray(resized.transpose(2, 0, 1)[None])


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("detect_classify")).parent


def test_the_example_serves_a_jpeg_as_the_steps_by_hand(
    example: Path, server_factory: ServerFactory
) -> None:
    server = server_factory(example / "config.json")
    data = _jpeg([0, 3])
    image = _decode_as_the_server_does(data)
    scores = run(compiled(example / "detector" / "1" / "model.xml"), image=image)["scores"]
    crops = crop_node.execute({"image": image, "scores": scores}, {}, {"threshold": 0.5})
    classifier = compiled(example / "classifier" / "1" / "model.xml")
    expected = np.stack([run(classifier, input=c)["probabilities"] for c in crops["crops"]])

    body = {"inputs": {"image": [{"b64": base64.b64encode(data).decode()}]}}
    reply = server.post("/v1/models/detect_classify:predict", body)
    assert reply.status_code == 200, reply.text[:300]
    outputs = reply.json()["outputs"]
    assert np.asarray(outputs["boxes"]).tolist() == [[0, 0, 112, 112], [112, 112, 224, 224]]
    got = np.asarray(outputs["probabilities"], dtype=np.float32)
    assert got.shape == (2, 1, 1000)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)

    dark = {"inputs": {"image": [{"b64": base64.b64encode(_jpeg([])).decode()}]}}
    assert server.post("/v1/models/detect_classify:predict", dark).status_code == 204
    meta = server.get("/v2/models/detect_classify").json()
    assert [(o["name"], o["shape"]) for o in meta["outputs"]] == [
        ("boxes", [-1, 4]),
        ("probabilities", [-1, 1, 1000]),
    ]
    missing = server.post("/v1/models/detect_classify:predict", {"inputs": {"img": [1]}})
    assert missing.status_code == 400, error_of(missing)
