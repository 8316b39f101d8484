"""Model-config knobs that change what a model accepts: mapping_config.json aliases, `shape`
(anonymous, per input, ranges, auto), `batch_size` (int and auto) and `layout` "NHWC:NCHW";
several models in one config. Numbers are checked against OpenVINO on the reshaped model."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import openvino as ov
import pytest

from demo import models
from tests.core.helpers import (
    RunningServer,
    b64,
    classifier,
    classifier_hw_dynamic,
    encode_image,
    error_of,
    image_input,
    reference,
    save_ir,
    write_config,
)


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, server_factory: Callable[..., RunningServer]
) -> RunningServer:
    root = tmp_path_factory.mktemp("shapes")
    save_ir(models.two_inputs(), root / "two_inputs" / "1")
    (root / "two_inputs" / "1" / "mapping_config.json").write_text(
        json.dumps({"inputs": {"a": "left", "b": "right"}, "outputs": {"sum": "total"}})
    )
    save_ir(models.two_inputs(), root / "two_inputs_plain" / "1")
    save_ir(classifier(batch=1), root / "classifier" / "1")
    save_ir(classifier(batch=None), root / "classifier_dyn" / "1")
    save_ir(classifier_hw_dynamic(), root / "classifier_hw" / "1")
    save_ir(models.scaler(2.0, shape=(1, 4)), root / "scaler_static" / "1")
    config = write_config(
        root / "config.json",
        [
            {"name": "mapped", "base_path": "two_inputs"},
            {"name": "mapped_shape", "base_path": "two_inputs", "shape": {"left": "(3,4)"}},
            {"name": "fixed_anonymous", "base_path": "classifier", "shape": "(1,3,112,112)"},
            {
                "name": "fixed_named",
                "base_path": "classifier_hw",
                "shape": {"input": "(1,3,112,112)"},
            },
            {"name": "shape_auto", "base_path": "classifier", "shape": "auto"},
            {"name": "batch4", "base_path": "classifier", "batch_size": 4},
            {"name": "batch_auto", "base_path": "scaler_static", "batch_size": "auto"},
            {"name": "batch_range", "base_path": "scaler_static", "shape": "(1:3,4)"},
            {
                "name": "shape_map",
                "base_path": "two_inputs_plain",
                "shape": {"a": "(2,4)", "b": "(2,4)"},
            },
            {"name": "nhwc", "base_path": "classifier_dyn", "layout": "NHWC:NCHW"},
        ],
    )
    return server_factory(config)


def kserve_metadata(server: RunningServer, name: str) -> dict[str, Any]:
    response = server.get(f"/v2/models/{name}")
    assert response.status_code == 200, response.text
    doc = response.json()
    assert isinstance(doc, dict)
    return doc


def shapes_of(doc: dict[str, Any], key: str) -> dict[str, list[int]]:
    return {t["name"]: t["shape"] for t in doc[key]}


def reshaped_classifier(shape: list[int]) -> ov.Model:
    model = classifier(batch=1)
    model.reshape({"input": ov.PartialShape(shape)})
    return model


# -- mapping_config.json -----------------------------------------------------------------------


def test_mapping_renames_inputs_and_outputs_everywhere(server: RunningServer) -> None:
    doc = kserve_metadata(server, "mapped")
    assert shapes_of(doc, "inputs") == {"left": [-1, 4], "right": [-1, 4]}
    assert shapes_of(doc, "outputs") == {"total": [-1, 4], "product": [-1, 4]}
    signature = server.get("/v1/models/mapped/metadata").json()["metadata"]["signature_def"][
        "signatureDef"
    ]["serving_default"]
    assert sorted(signature["inputs"]) == ["left", "right"]
    assert sorted(signature["outputs"]) == ["product", "total"]
    assert {v["name"] for v in signature["inputs"].values()} == {"left", "right"}

    response = server.post(
        "/v1/models/mapped:predict", {"inputs": {"left": [[1, 2, 3, 4]], "right": [[1, 1, 1, 1]]}}
    )
    assert response.status_code == 200, response.text
    assert response.json() == {
        "outputs": {"total": [[2.0, 3.0, 4.0, 5.0]], "product": [[1.0, 2.0, 3.0, 4.0]]}
    }
    infer = server.post(
        "/v2/models/mapped/infer",
        {
            "inputs": [
                {"name": "left", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]},
                {"name": "right", "shape": [1, 4], "datatype": "FP32", "data": [2, 2, 2, 2]},
            ]
        },
    ).json()
    assert {o["name"]: o["data"] for o in infer["outputs"]} == {
        "total": [3.0, 4.0, 5.0, 6.0],
        "product": [2.0, 4.0, 6.0, 8.0],
    }


def test_mapping_hides_the_original_names(server: RunningServer) -> None:
    response = server.post(
        "/v1/models/mapped:predict", {"inputs": {"a": [[1, 2, 3, 4]], "b": [[1, 1, 1, 1]]}}
    )
    assert response.status_code == 400
    assert error_of(response).startswith("Missing input with specific name")


def test_config_shape_uses_the_mapped_name(server: RunningServer) -> None:
    assert shapes_of(kserve_metadata(server, "mapped_shape"), "inputs") == {
        "left": [3, 4],
        "right": [-1, 4],
    }


# -- shape -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["fixed_anonymous", "fixed_named"])
def test_fixed_shape_accepts_only_that_shape(server: RunningServer, name: str) -> None:
    assert shapes_of(kserve_metadata(server, name), "inputs") == {"input": [1, 3, 112, 112]}
    small = image_input(seed=21)[:, :, :112, :112].copy()
    response = server.post(f"/v1/models/{name}:predict", {"inputs": small.tolist()})
    assert response.status_code == 200, response.text
    expected = reference(reshaped_classifier([1, 3, 112, 112]), {"input": small})
    assert np.allclose(
        np.asarray(response.json()["outputs"], np.float32), expected["probabilities"], rtol=1e-5
    )

    original = image_input(seed=21)
    response = server.post(f"/v1/models/{name}:predict", {"inputs": original.tolist()})
    assert response.status_code == 400
    assert error_of(response) == (
        "Invalid input shape - Expected: (1,3,112,112); Actual: (1,3,224,224); input name: input"
    )


def test_shape_auto_accepts_any_shape(server: RunningServer) -> None:
    """OVMS: the model's own shape, then each request's shape (the version is reloaded)."""
    assert shapes_of(kserve_metadata(server, "shape_auto"), "inputs") == {"input": [1, 3, 224, 224]}
    for shape in ([1, 3, 300, 300], [2, 3, 224, 224], [3, 3, 64, 142]):
        data = np.random.default_rng(sum(shape)).uniform(0, 1, shape).astype(np.float32)
        response = server.post("/v1/models/shape_auto:predict", {"inputs": data.tolist()})
        assert response.status_code == 200, (shape, response.text)
        assert shapes_of(kserve_metadata(server, "shape_auto"), "inputs") == {"input": shape}
        got = np.asarray(response.json()["outputs"], np.float32)
        expected = reference(reshaped_classifier([-1, 3, -1, -1]), {"input": data})
        assert got.shape == (shape[0], 1000)
        assert np.allclose(got, expected["probabilities"], rtol=1e-5)


def test_per_input_shape_map(server: RunningServer) -> None:
    doc = kserve_metadata(server, "shape_map")
    assert shapes_of(doc, "inputs") == {"a": [2, 4], "b": [2, 4]}
    assert shapes_of(doc, "outputs") == {"sum": [2, 4], "product": [2, 4]}
    body = {"inputs": {"a": [[1, 2, 3, 4], [5, 6, 7, 8]], "b": [[1, 1, 1, 1], [2, 2, 2, 2]]}}
    response = server.post("/v1/models/shape_map:predict", body)
    assert response.status_code == 200, response.text
    assert response.json()["outputs"]["sum"] == [[2.0, 3.0, 4.0, 5.0], [7.0, 8.0, 9.0, 10.0]]
    response = server.post(
        "/v1/models/shape_map:predict", {"inputs": {"a": [[1, 2, 3, 4]], "b": [[1, 1, 1, 1]]}}
    )
    assert response.status_code == 400
    assert error_of(response) == (
        "Invalid input batch size - Expected: 2; Actual: 1; input name: a"
    )


# -- batch_size --------------------------------------------------------------------------------


def test_batch_size_int_sets_the_batch(server: RunningServer) -> None:
    doc = kserve_metadata(server, "batch4")
    assert shapes_of(doc, "inputs") == {"input": [4, 3, 224, 224]}
    assert shapes_of(doc, "outputs") == {"probabilities": [4, 1000]}
    batch = image_input(seed=22, batch=4)
    response = server.post("/v1/models/batch4:predict", {"instances": batch.tolist()})
    assert response.status_code == 200, response.text
    got = np.asarray(response.json()["predictions"], np.float32)
    assert got.shape == (4, 1000)
    expected = reference(reshaped_classifier([4, 3, 224, 224]), {"input": batch})
    assert np.allclose(got, expected["probabilities"], rtol=1e-5)

    response = server.post(
        "/v1/models/batch4:predict", {"instances": image_input(seed=22).tolist()}
    )
    assert response.status_code == 400
    assert error_of(response) == (
        "Invalid input batch size - Expected: 4; Actual: 1; input name: input"
    )


def test_batch_size_auto_accepts_any_batch(server: RunningServer) -> None:
    """OVMS: the model's own batch, then each request's batch (the version is reloaded)."""
    assert shapes_of(kserve_metadata(server, "batch_auto"), "inputs") == {"x": [1, 4]}
    for batch in (1, 3, 8):
        data = np.arange(batch * 4, dtype=np.float32).reshape(batch, 4)
        response = server.post("/v1/models/batch_auto:predict", {"instances": data.tolist()})
        assert response.status_code == 200, response.text
        assert response.json() == {"predictions": (data * 2).tolist()}
        assert shapes_of(kserve_metadata(server, "batch_auto"), "inputs") == {"x": [batch, 4]}


def test_batch_range(server: RunningServer) -> None:
    for batch in (1, 3):
        response = server.post(
            "/v1/models/batch_range:predict", {"instances": [[1, 1, 1, 1]] * batch}
        )
        assert response.status_code == 200, response.text
    response = server.post("/v1/models/batch_range:predict", {"instances": [[1, 1, 1, 1]] * 4})
    assert response.status_code == 400
    assert error_of(response).startswith("Invalid input batch size - Expected: [1~3]; Actual: 4")


# -- layout ------------------------------------------------------------------------------------


def test_layout_nhwc_to_nchw(server: RunningServer) -> None:
    doc = kserve_metadata(server, "nhwc")
    assert shapes_of(doc, "inputs") == {"input": [-1, 224, 224, 3]}
    nchw = image_input(seed=23, batch=2)
    nhwc = nchw.transpose(0, 2, 3, 1)
    response = server.post("/v1/models/nhwc:predict", {"inputs": {"input": nhwc.tolist()}})
    assert response.status_code == 200, response.text
    got = np.asarray(response.json()["outputs"], np.float32)
    expected = reference(classifier(batch=None), {"input": nchw})["probabilities"]
    assert np.allclose(got, expected, rtol=1e-5)
    response = server.post("/v1/models/nhwc:predict", {"inputs": {"input": nchw.tolist()}})
    assert response.status_code == 400
    assert error_of(response).startswith("Invalid input shape")


def test_layout_nhwc_to_nchw_accepts_images(server: RunningServer) -> None:
    """OVMS: binary images need NHWC; with layout NHWC:NCHW an NCHW model takes them."""
    pixels = np.random.default_rng(24).integers(0, 256, (224, 224, 3), dtype=np.uint8)
    response = server.post("/v1/models/nhwc:predict", {"instances": [b64(encode_image(pixels))]})
    assert response.status_code == 200, response.text
    bgr = pixels[None, :, :, ::-1].astype(np.float32).transpose(0, 3, 1, 2).copy()
    expected = reference(classifier(batch=None), {"input": bgr})["probabilities"]
    assert np.allclose(np.asarray(response.json()["predictions"], np.float32), expected, rtol=1e-5)


# -- many models in one config -----------------------------------------------------------------


def test_every_model_of_the_config_is_served(server: RunningServer) -> None:
    doc = server.get("/v1/config").json()
    assert sorted(doc) == sorted(
        [
            "mapped",
            "mapped_shape",
            "fixed_anonymous",
            "fixed_named",
            "shape_auto",
            "batch4",
            "batch_auto",
            "batch_range",
            "shape_map",
            "nhwc",
        ]
    )
    for name, entry in doc.items():
        assert [s["state"] for s in entry["model_version_status"]] == ["AVAILABLE"], name
        assert server.get(f"/v2/models/{name}/ready").status_code == 200
