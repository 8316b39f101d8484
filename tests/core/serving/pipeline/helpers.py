"""Helpers for the pipeline and stateful suites: an in-process App over a real ModelManager,
an in-process gRPC server (the product's own grpc_server.build on 127.0.0.1), and pipeline
config builders. Models are real IR compiled by OpenVINO; expected numbers come from
OpenVINO directly, step by step."""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import openvino as ov
import orjson

from core.api import App, Response, make_request
from core.config import Settings
from core.serving.registry import ModelManager

NODES = Path(__file__).parent / "nodes"


def app_for(config: Path, cache: Path) -> App:
    settings = Settings(config_path=str(config), cache_dir=str(cache))
    return App(ModelManager.start(settings), settings)


def call(
    app: App, method: str, path: str, body: Any = None, headers: Mapping[str, str] | None = None
) -> Response:
    raw = body if isinstance(body, bytes) else (b"" if body is None else orjson.dumps(body))
    return app.handle(make_request(method, path, raw, headers))


def doc(response: Response) -> Any:
    assert response.status == 200, (response.status, response.body[:500])
    return orjson.loads(response.body)


def error(response: Response) -> str:
    message = orjson.loads(response.body)["error"]
    assert isinstance(message, str)
    return message


def tfs_columns(outputs: Any) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in outputs["outputs"].items()}


def kserve_outputs(answer: Any) -> dict[str, np.ndarray]:
    return {o["name"]: np.asarray(o["data"]).reshape(o["shape"]) for o in answer["outputs"]}


def kserve_body(**inputs: np.ndarray) -> dict[str, Any]:
    from core.tensors import dtypes

    return {
        "inputs": [
            {
                "name": k,
                "shape": list(v.shape),
                "datatype": dtypes.from_numpy(v.dtype).kserve,
                "data": v.reshape(-1).tolist(),
            }
            for k, v in inputs.items()
        ]
    }


def compiled(xml: Path) -> ov.CompiledModel:
    return ov.Core().compile_model(str(xml), "CPU")


def run(model: ov.CompiledModel, **inputs: np.ndarray) -> dict[str, np.ndarray]:
    result = model(inputs)
    return {port.get_any_name(): np.asarray(result[port]) for port in model.outputs}


def write_config(
    path: Path,
    models: list[dict[str, Any]],
    pipelines: list[dict[str, Any]],
    libraries: Mapping[str, str],
) -> Path:
    path.write_text(
        json.dumps(
            {
                "model_config_list": [{"config": m} for m in models],
                "custom_node_library_config_list": [
                    {"name": n, "base_path": p} for n, p in libraries.items()
                ],
                "pipeline_config_list": pipelines,
            },
            indent=1,
        )
    )
    return path


def library(name: str) -> str:
    return str(NODES / f"{name}.py")


def src(node: str, item: str) -> dict[str, str]:
    return {"node_name": node, "data_item": item}


def model_node(
    name: str, model: str, inputs: Mapping[str, dict[str, str]], outputs: list[str], **extra: Any
) -> dict[str, Any]:
    return {
        "name": name,
        "type": "DL model",
        "model_name": model,
        "inputs": [{k: v} for k, v in inputs.items()],
        "outputs": [{"data_item": o, "alias": o} for o in outputs],
        **extra,
    }


def custom_node(
    name: str, lib: str, inputs: Mapping[str, dict[str, str]], outputs: list[str], **extra: Any
) -> dict[str, Any]:
    return {
        "name": name,
        "type": "custom",
        "library_name": lib,
        "inputs": [{k: v} for k, v in inputs.items()],
        "outputs": [{"data_item": o, "alias": o} for o in outputs],
        **extra,
    }


def pipeline(
    name: str, inputs: list[str], nodes: list[dict[str, Any]], outputs: Mapping[str, dict[str, str]]
) -> dict[str, Any]:
    return {
        "name": name,
        "inputs": inputs,
        "nodes": nodes,
        "outputs": [{k: v} for k, v in outputs.items()],
    }


def chain(
    name: str = "chain", offset: str = "0.5", journal: str = "", lib: str = "offset"
) -> dict[str, Any]:
    """x -> scaler (x2) -> custom offset (a = y + offset, b = y) -> two_inputs (sum, product)."""
    params = {"offset": offset, **({"journal": journal} if journal else {})}
    return pipeline(
        name,
        ["x"],
        [
            model_node("scale", "scaler", {"x": src("request", "x")}, ["y"]),
            custom_node("shift", lib, {"y": src("scale", "y")}, ["a", "b"], params=params),
            model_node(
                "pair",
                "two_inputs",
                {"a": src("shift", "a"), "b": src("shift", "b")},
                ["sum", "product"],
            ),
        ],
        {"sum": src("pair", "sum"), "product": src("pair", "product"), "scaled": src("scale", "y")},
    )


def fanout(name: str = "fanout") -> dict[str, Any]:
    """x -> split (3 items, x*1, x*2, x*3) -> scaler per item -> total (gather_from_node)."""
    return pipeline(
        name,
        ["x"],
        [
            custom_node(
                "split",
                "split",
                {"x": src("request", "x")},
                ["items"],
                params={"count": "3"},
                demultiply_count=3,
            ),
            model_node("scale", "scaler", {"x": src("split", "items")}, ["y"]),
            custom_node(
                "total",
                "total",
                {"ys": src("scale", "y")},
                ["total", "count"],
                gather_from_node="split",
            ),
        ],
        {"total": src("total", "total"), "count": src("total", "count"), "each": src("scale", "y")},
    )


# -- gRPC, in process ------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def grpc_channel(manager: ModelManager) -> Iterator[grpc.Channel]:
    """The product's gRPC services (handlers.grpc_server.build) over `manager`."""
    from handlers import grpc_server

    args = argparse.Namespace(
        grpc_workers=4,
        grpc_max_message_bytes=64 << 20,
        grpc_bind_address="127.0.0.1",
        port=_free_port(),
    )
    server, health, _ = grpc_server.build(manager, args)
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{args.port}") as channel:
            yield channel
    finally:
        health.shutdown()
        server.stop(0)
