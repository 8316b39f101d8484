"""A stateful model's calls are counted, timed and observed exactly as a stateless model's: the
same model served both ways, the same calls, the same OVMS metrics samples."""

from __future__ import annotations

import json
from pathlib import Path

from core import metrics
from demo.models import save
from tests.core.serving.pipeline.helpers import app_for, call, doc
from tests.core.serving.stateful.conftest import accumulator, tfs_body

# sampled once per call (counters, histogram counts) or back at rest after it (gauges)
PER_CALL = (
    "ovms_requests_success",
    "ovms_requests_fail",
    "ovms_request_time_us_count",
    "ovms_inference_time_us_count",
    "ovms_wait_for_infer_req_time_us_count",
    "ovms_infer_req_active",
    "ovms_current_requests",
    "ov_serverless_variant_requests",
)


def samples(model: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample, labels but the model's name and the variant): value} of the PER_CALL families,
    summed over variants (a stateless model may run on two)."""
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in metrics.REGISTRY:
        for sample, labels, value in family.samples():
            if sample not in PER_CALL or labels.get("name") != model:
                continue
            rest = tuple(sorted((k, v) for k, v in labels.items() if k not in ("name", "variant")))
            found[sample, rest] = found.get(sample, 0.0) + value
    return found


def test_stateful_calls_show_in_the_metrics_as_stateless_calls_do(tmp_path: Path) -> None:
    save(accumulator(), tmp_path / "acc" / "1")
    entries = [
        {"config": {"name": "metered_plain", "base_path": str(tmp_path / "acc")}},
        {
            "config": {
                "name": "metered_sequence",
                "base_path": str(tmp_path / "acc"),
                "stateful": True,
            }
        },
    ]
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_config_list": entries}))
    app = app_for(config, tmp_path / "cache")

    for control in (1, 0, 2):  # START, a call within the sequence, END
        doc(call(app, "POST", "/v1/models/metered_plain:predict", tfs_body([1, 2, 3, 4])))
        doc(
            call(
                app,
                "POST",
                "/v1/models/metered_sequence:predict",
                tfs_body([1, 2, 3, 4], 7, control),
            )
        )
    for model in ("metered_plain", "metered_sequence"):  # one failure each: bad input
        assert (
            call(app, "POST", f"/v1/models/{model}:predict", {"inputs": {"y": [[1]]}}).status == 400
        )

    plain, sequence = samples("metered_plain"), samples("metered_sequence")
    assert plain[("ovms_inference_time_us_count", (("version", "1"),))] == 3
    assert plain[("ovms_wait_for_infer_req_time_us_count", (("version", "1"),))] == 3
    assert sequence == plain
