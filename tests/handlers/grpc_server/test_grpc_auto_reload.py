"""shape "auto" / batch_size "auto" over TF Serving gRPC with ovmsclient, as OVMS's functional
reshaping tests drive it: each request of a new shape is answered for that shape, and the
metadata then shows it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import openvino as ov
import ovmsclient
import pytest

from tests.core.helpers import classifier, reference, save_ir
from tests.handlers.grpc_server.helpers import Server

SHAPES = [(1, 3, 64, 64), (4, 3, 32, 48), (1, 3, 224, 224), (2, 3, 64, 64)]


@pytest.fixture(scope="module")
def auto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("grpc-auto")
    save_ir(classifier(batch=1), root / "classifier" / "1")
    (root / "config.json").write_text(
        json.dumps(
            {
                "model_config_list": [
                    {"config": {"name": "shape_auto", "base_path": "classifier", "shape": "auto"}},
                    {
                        "config": {
                            "name": "batch_auto",
                            "base_path": "classifier",
                            "batch_size": "auto",
                        }
                    },
                ]
            }
        )
    )
    running = Server.start(root / "config.json", root, rest=False)
    try:
        yield running
    finally:
        running.stop()


def _any_shape_classifier() -> ov.Model:
    model = classifier(batch=None)
    model.reshape({"input": ov.PartialShape([-1, 3, -1, -1])})
    return model


def _input_shape(client: ovmsclient.GrpcClient, name: str) -> list[int]:
    return list(client.get_model_metadata(name)["inputs"]["input"]["shape"])


def test_shape_auto_over_grpc(auto_server: Server) -> None:
    client = ovmsclient.make_grpc_client(auto_server.target)
    assert _input_shape(client, "shape_auto") == [1, 3, 224, 224]
    for shape in SHAPES:
        data = np.random.default_rng(sum(shape)).uniform(0, 1, shape).astype(np.float32)
        got = client.predict({"input": data}, "shape_auto")
        assert got.shape == (shape[0], 1000)
        want = reference(_any_shape_classifier(), {"input": data})["probabilities"]
        assert np.allclose(got, want, rtol=1e-3, atol=1e-6)
        assert _input_shape(client, "shape_auto") == list(shape)
    assert client.get_model_status("shape_auto")[1]["state"] == "AVAILABLE"


def test_batch_auto_over_grpc(auto_server: Server) -> None:
    client = ovmsclient.make_grpc_client(auto_server.target)
    for batch in (1, 6, 2):
        data = np.ones((batch, 3, 224, 224), np.float32)
        assert client.predict({"input": data}, "batch_auto").shape == (batch, 1000)
        assert _input_shape(client, "batch_auto") == [batch, 3, 224, 224]
    with pytest.raises(ovmsclient.tfs_compat.base.errors.InvalidInputError):
        client.predict({"input": np.ones((2, 3, 100, 100), np.float32)}, "batch_auto")
