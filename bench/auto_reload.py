"""What a batch_size "auto" reload costs the request that triggers it.

The ResNet-50-sized bench model is served in this process (core.api.App, one request at a time,
as on Lambda) with `batch_size: "auto"`. Each round sends warm requests at one batch, then one
request at the other batch (it waits for the reload: read, reshape, compile), then warm requests
at that batch. The reload's cost is that first request minus the warm p50 at its batch; the
version's own timings split it into read and compile. The same requests against `batch_size: -1`
(an explicit dynamic batch: never reloads) are the comparison.

    PYTHONPATH=. .venv/bin/python -m bench.auto_reload [--rounds 3] [--warm 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from bench.models import resnet50_like


def _app(root: Path, batch_size: Any) -> Any:
    from core.api import App
    from core.config import Settings
    from core.serving.registry import ModelManager

    config = root / f"config-{batch_size}.json"
    config.write_text(
        json.dumps(
            {
                "model_config_list": [
                    {
                        "config": {
                            "name": "resnet",
                            "base_path": str(root / "resnet"),
                            "batch_size": batch_size,
                            "allow_cache": False,
                        }
                    }
                ]
            }
        )
    )
    settings = Settings(config_path=str(config), cache_dir=str(root / f"cache-{batch_size}"))
    return App(ModelManager.start(settings), settings)


def _predict(app: Any, batch: int) -> float:
    from core.api import make_request

    data = np.random.default_rng(batch).uniform(0, 1, (batch, 3, 224, 224)).astype(np.float32)
    body = json.dumps({"instances": data.tolist()}).encode()
    started = time.perf_counter()
    response = app.handle(make_request("POST", "/v1/models/resnet:predict", body, {}))
    elapsed = time.perf_counter() - started
    assert response.status == 200, response.body[:300]
    return elapsed


def _round(app: Any, batch: int, warm: int) -> dict[str, float]:
    before = app.manager.get("resnet")
    first = _predict(app, batch)
    warm_p50 = statistics.median(_predict(app, batch) for _ in range(warm))
    version = app.manager.get("resnet")
    timings = version.timings if version is not before else {}
    return {
        "batch": batch,
        "first_s": first,
        "warm_p50_s": warm_p50,
        "reload_cost_s": first - warm_p50,
        "read_s": timings.get("read_s", 0.0),
        "compile_s": timings.get("compile_s", 0.0),
        "auto_reload_s": timings.get("auto_reload_s", 0.0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="batch 2 then 1, this many times")
    parser.add_argument("--warm", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ov.save_model(resnet50_like(batch=1), root / "resnet" / "1" / "model.xml")
        auto, dynamic = _app(root, "auto"), _app(root, -1)
        _predict(auto, 1)
        _predict(dynamic, 1)
        rows: dict[str, list[dict[str, float]]] = {"auto": [], "dynamic": []}
        for index in range(2 * args.rounds):  # 2, 1, 2, 1...: every round changes the batch
            batch = 2 if index % 2 == 0 else 1
            rows["auto"].append(_round(auto, batch, args.warm))
            rows["dynamic"].append(_round(dynamic, batch, args.warm))
    for name, runs in rows.items():
        for run in runs:
            print(name, {k: round(v, 3) for k, v in run.items()})
    auto_runs = [r for r in rows["auto"] if r["auto_reload_s"]]
    cost = statistics.median(r["reload_cost_s"] for r in auto_runs)
    compile_s = statistics.median(r["compile_s"] for r in auto_runs)
    ratio = statistics.median(
        a["warm_p50_s"] / d["warm_p50_s"]
        for a, d in zip(rows["auto"], rows["dynamic"], strict=True)
    )
    print(
        f"auto reload: +{cost:.3f} s on the request that triggers it (median of "
        f"{len(auto_runs)}; compile {compile_s:.3f} s); warm p50 static/dynamic {ratio:.2f}"
    )


if __name__ == "__main__":
    main()
