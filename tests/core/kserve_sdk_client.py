"""The kserve SDK's v2 clients, run in their own process as a user's client runs:
kserve's generated protos and ours share the `inference` proto package, and one process's
descriptor pool cannot hold both.

    python tests/core/kserve_sdk_client.py SCENARIO REST_URL GRPC_PORT   -> one JSON line
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import httpx
import kserve
import numpy as np


def _x() -> Any:
    x = kserve.InferInput("x", [1, 4], "FP32")
    x.set_data_from_numpy(np.array([[1, 2, 3, 4]], np.float32))
    return x


def _rest() -> Any:
    return kserve.InferenceRESTClient(kserve.RESTConfig(protocol="v2"))


async def rest_health(url: str, _: str) -> Any:
    client = _rest()
    try:
        return [
            await client.is_server_live(url),
            await client.is_server_ready(url),
            await client.is_model_ready(url, "scaler"),
            await client.is_model_ready(url, "empty"),
            await client.is_model_ready(url, "nope"),
        ]
    finally:
        await client.close()


async def rest_infer(url: str, _: str) -> Any:
    client = _rest()
    try:
        answer = await client.infer(
            url, kserve.InferRequest("scaler", [_x()], request_id="req-7"), model_name="scaler"
        )
        return {"id": answer.id, "data": answer.outputs[0].as_numpy().tolist()}
    finally:
        await client.close()


async def rest_bad_id(url: str, _: str) -> Any:
    client = _rest()
    try:
        await client.infer(
            url,
            {
                "id": 7,
                "inputs": [
                    {"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}
                ],
            },
            model_name="scaler",
        )
        return {"raised": None}
    except httpx.HTTPStatusError as exc:
        return {"raised": "HTTPStatusError", "status": exc.response.status_code}
    finally:
        await client.close()


async def grpc_all(_: str, port: str) -> Any:
    client = kserve.InferenceGRPCClient(f"127.0.0.1:{port}", timeout=30, retries=2)
    try:
        answer = await client.infer(kserve.InferRequest("scaler", [_x()], request_id="g-1"))
        return {
            "live": await client.is_server_live(),
            "ready": await client.is_server_ready(),
            "model_ready": await client.is_model_ready("scaler"),
            "data": answer.outputs[0].as_numpy().tolist(),
        }
    finally:
        await client.close()


SCENARIOS = {
    "rest_health": rest_health,
    "rest_infer": rest_infer,
    "rest_bad_id": rest_bad_id,
    "grpc_all": grpc_all,
}

if __name__ == "__main__":
    scenario, url, port = sys.argv[1:4]
    print(json.dumps(asyncio.run(SCENARIOS[scenario](url, port))))
