"""Warm REST predict latency of the 224x224 classifier vs direct OpenVINO, same run.

    python -m bench.rest_latency [--count 200]
"""

from __future__ import annotations

import argparse
import os
import platform

import numpy as np
import openvino as ov
import orjson
import requests

from bench.common import latencies, save, server, summary, workdir
from demo.models import classifier
from demo.models import save as save_model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=200)
    count = parser.parse_args().count
    root = workdir()
    xml = save_model(classifier(seed=0, batch=1), root / "classifier" / "1")
    config = root / "config.json"
    config.write_text('{"model_config_list": [{"config": {"name": "classifier", '
                      '"base_path": "classifier"}}]}')
    x = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
    compiled = ov.Core().compile_model(str(xml), "CPU", {"PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()
    rows = {"raw openvino": summary(latencies(lambda: request.infer({0: x}), count))}
    with server(config) as base, requests.Session() as http:
        tfs = orjson.dumps({"instances": x.tolist()})
        url = base + "/v1/models/classifier:predict"
        rows["REST TFS JSON"] = summary(latencies(lambda: _ok(http.post(url, data=tfs)), count))
        header = orjson.dumps({"inputs": [{"name": "input", "shape": [1, 3, 224, 224],
                                           "datatype": "FP32",
                                           "parameters": {"binary_data_size": x.nbytes}}],
                               "parameters": {"binary_data_output": True}})
        body = header + x.tobytes()
        kurl = base + "/v2/models/classifier/infer"
        headers = {"Inference-Header-Content-Length": str(len(header)),
                   "Content-Type": "application/octet-stream"}
        rows["REST KServe binary"] = summary(latencies(
            lambda: _ok(http.post(kurl, data=body, headers=headers)), count))
    raw = rows["raw openvino"]["p50_ms"]
    print(f"{'case':22} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'p50 / raw':>10}")
    for name, row in rows.items():
        row["ratio_p50"] = row["p50_ms"] / raw
        print(f"{name:22} {row['p50_ms']:8.2f} {row['p90_ms']:8.2f} {row['p99_ms']:8.2f} "
              f"{row['ratio_p50']:10.2f}")
    save("rest_latency", {"machine": platform.platform(), "cpus": os.cpu_count(),
                          "openvino": ov.__version__, "count": count, "rows": rows})


def _ok(response: requests.Response) -> None:
    if response.status_code != 200:
        raise RuntimeError(response.text[:300])


if __name__ == "__main__":
    main()
