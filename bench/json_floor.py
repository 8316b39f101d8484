"""REST JSON end to end against its floor (issue 37): `python -m bench.json_floor`.

On the ResNet-50-sized FP16 IR served by an untuned `serve`, one client, in alternating blocks:
  serve     TFS JSON, KServe JSON and KServe binary (1x3x224x224 f32) predictions
  noop      the same request bytes through the same HTTP server (handlers/http_server.py) in
            another process whose handler parses nothing and answers the bytes `serve` answered
            to that request (same size, same headers)
  parse     the bare simdjson parse of the TFS body (parse + as_buffer), in this process
  codec     the server's TFS and KServe JSON decode of the same bodies and the TFS JSON
            encode of a 1x1000 f32 output, in this process (no inference to blur them)
The JSON figure over the floor is (JSON p50 - binary p50) - (noop JSON p50 - noop binary
p50): what the server spends on JSON beyond moving its bytes, to set against the bare parse.
Its spread is the same difference taken block by block (min-max). The floor ratio, (binary
p50 + the noop difference + the bare parse) / binary p50, is the least JSON / binary ratio a
server that moves these bytes and parses them once can reach. The machine's load average
is recorded at the start and the end. Results: bench/results/json_floor.json.
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench import cases
from bench.adaptive import MODEL, bare_parse, build, server
from bench.common import base_env, free_port, http_ok, latencies, process, save, workdir

PARSE = "bare simdjson parse (TFS body)"


def noop_server(port: int, answers_file: Path) -> None:
    """handlers.http_server.Server with a handler that answers each case's recorded reply."""
    from core.api import Response
    from handlers import http_server

    answers: dict[str, tuple[bytes, dict[str, str]]] = pickle.loads(answers_file.read_bytes())

    def handle(request: Any) -> Response:
        if request.method == "GET":
            return Response(200, b"{}", {"content-type": "application/json"})
        kind = request.headers.get("content-type", "")
        body, headers = answers[f"{request.path} {kind}"]
        return Response(200, body, headers)

    listener = http_server.listen("127.0.0.1", port)
    http_server.Server(
        handle, listener, threads=4, read_timeout=60, max_body=1 << 30
    ).serve_forever()


def recorded(port: int, requests: dict[str, tuple[str, bytes, dict[str, str]]]) -> dict:
    """Per request (path + content type), the body and headers `serve` answers it with."""
    import http.client

    answers = {}
    for path, body, headers in requests.values():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", path, body, headers)
        response = conn.getresponse()
        data = response.read()
        keep = {k.lower(): v for k, v in response.getheaders()}
        kept = {
            k: v
            for k, v in keep.items()
            if k in ("content-type", "inference-header-content-length")
        }
        answers[f"{path} {headers['Content-Type']}"] = (data, kept)
        conn.close()
    return answers


def requests_of(payload: cases.Payload) -> dict[str, tuple[str, bytes, dict[str, str]]]:
    json_headers = {"Content-Type": "application/json"}
    binary = cases.kserve_binary(payload.model, payload.x)
    return {
        cases.REST_TFS_JSON: (f"/v1/models/{MODEL}:predict", payload.tfs_json, json_headers),
        cases.REST_KSERVE_JSON: (f"/v2/models/{MODEL}/infer", payload.kserve_json, json_headers),
        cases.REST_KSERVE_BINARY: (binary["path"], binary["body"], binary["headers"]),
    }


def alternate(
    calls: dict[str, Callable[[], object]], blocks: int, size: int
) -> dict[str, list[list[float]]]:
    """Each call's latencies, block by block, the calls taking turns."""
    for call in calls.values():
        latencies(call, 0, warmup=3)
    out: dict[str, list[list[float]]] = {name: [] for name in calls}
    for _ in range(blocks):
        for name, call in calls.items():
            out[name].append(latencies(call, size, warmup=0))
    return out


def codec_calls(bodies: dict[str, bytes]) -> dict[str, Callable[[], object]]:
    """The server's JSON decode of each body and the JSON encode of a 1x1000 f32 answer."""
    from core.codecs import kserve_rest, tfs_rest
    from core.tensors import dtypes
    from core.tensors.spec import TensorSpec

    spec = {
        "input": TensorSpec(
            "input", dtypes.from_ov("f32"), ((1, 1), (3, 3), (224, 224), (224, 224)), ""
        )
    }
    answer = {"probabilities": np.random.default_rng(1).random((1, 1000), np.float32)}
    tfs, kserve = bodies[cases.REST_TFS_JSON], bodies[cases.REST_KSERVE_JSON]
    return {
        "decode TFS JSON (in process)": lambda: tfs_rest.decode(tfs, spec),
        "decode KServe JSON (in process)": lambda: kserve_rest.decode(kserve, None, spec),
        "encode TFS JSON answer (in process)": lambda: tfs_rest.encode(answer, tfs_rest.ROW),
    }


def ms(times: list[float]) -> float:
    return 1e3 * statistics.median(times)


def figures(runs: dict[str, list[list[float]]], blocks: int) -> dict[str, Any]:
    out: dict[str, Any] = {name: ms([t for b in block for t in b]) for name, block in runs.items()}
    for kind in ("tfs", "kserve"):
        json_name = cases.REST_TFS_JSON if kind == "tfs" else cases.REST_KSERVE_JSON

        def over(i: int | None, json_name: str = json_name) -> float:
            def p(name: str) -> float:
                return ms(runs[name][i]) if i is not None else out[name]

            served = p(f"serve {json_name}") - p(f"serve {cases.REST_KSERVE_BINARY}")
            floor = p(f"noop {json_name}") - p(f"noop {cases.REST_KSERVE_BINARY}")
            return served - floor

        per_block = [over(i) for i in range(blocks)]
        out[f"{kind}_over_floor_ms"] = over(None)
        out[f"{kind}_over_floor_spread_ms"] = [min(per_block), max(per_block)]
        binary = out[f"serve {cases.REST_KSERVE_BINARY}"]
        floor = out[f"noop {json_name}"] - out[f"noop {cases.REST_KSERVE_BINARY}"]
        out[f"{kind}_json_over_binary"] = out[f"serve {json_name}"] / binary
        # the least JSON / binary ratio this server can reach: moving the bytes plus the parse
        out[f"{kind}_floor_ratio"] = (binary + floor + out[PARSE]) / binary
        out[f"{kind}_over_floor_minus_parse_ms"] = out[f"{kind}_over_floor_ms"] - out[PARSE]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--noop", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--size", type=int, default=6)
    args = parser.parse_args(argv)
    if args.noop:
        noop_server(int(args.noop[0]), Path(args.noop[1]))
        return 0
    doc: dict[str, Any] = {"load_start": os.getloadavg()}
    root = workdir()
    _, configs = build(root)
    payload = cases.Payload(
        MODEL, np.random.default_rng(0).random((1, 3, 224, 224), np.float32), b""
    )
    requests = requests_of(payload)
    with server(configs["adaptive"], root / "serve.log", root / "cache") as (port, _):
        answers = root / "answers.pickle"
        answers.write_bytes(pickle.dumps(recorded(port, requests)))
        noop_port = free_port()
        cmd = [sys.executable, "-m", "bench.json_floor", "--noop", str(noop_port), str(answers)]
        ready = lambda: http_ok(noop_port, "/")  # noqa: E731
        with process(cmd, base_env(), ready, log=root / "noop.log"):
            calls: dict[str, Callable[[], object]] = {}
            for name, (path, body, headers) in requests.items():
                calls[f"serve {name}"] = cases.rest(port, path, body, headers)()
                calls[f"noop {name}"] = cases.rest(noop_port, path, body, headers)()
            calls[PARSE] = bare_parse(requests[cases.REST_TFS_JSON][1])
            calls.update(codec_calls({name: body for name, (_, body, _) in requests.items()}))
            runs = alternate(calls, args.blocks, args.size)
    doc["figures"] = figures(runs, args.blocks)
    doc["body_bytes"] = {name: len(body) for name, (_, body, _) in requests.items()}
    doc["load_end"] = os.getloadavg()
    save("json_floor", doc)
    for key, value in doc.items():
        print(key, value if not isinstance(value, dict) else "")
        if isinstance(value, dict):
            for k, v in value.items():
                print(f"  {k}: {v:.2f}" if isinstance(v, float) else f"  {k}: {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
