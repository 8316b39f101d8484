"""/metrics as OVMS configures it: config.json's monitoring.metrics (enable, metrics_list,
endpoint_path), the --metrics_enable / --metrics_list flags and their OVS_* env, OVMS's
errors for bad values; and on by default here, unlike OVMS."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.api import App, make_request
from core.config import MetricsConfig, Settings, metrics_from_flags, parse_config
from core.errors import ConfigError
from core.serving.registry import ModelManager
from demo.models import write_demo_repository
from handlers import cli

MODELS = {"model_config_list": [{"config": {"name": "scaler", "base_path": "scaler"}}]}
ALL_OVMS = [
    "ovms_requests_success",
    "ovms_requests_fail",
    "ovms_requests_accepted",
    "ovms_requests_rejected",
    "ovms_responses",
    "ovms_inference_time_us",
    "ovms_wait_for_infer_req_time_us",
    "ovms_request_time_us",
    "ovms_current_requests",
    "ovms_current_graphs",
    "ovms_infer_req_active",
    "ovms_streams",
    "ovms_infer_req_queue_size",
]  # OVMS docs/metrics.md, "all metrics enabled"
DEFAULT = MetricsConfig()


def _parsed(monitoring: Any) -> MetricsConfig:
    return parse_config(json.dumps({**MODELS, "monitoring": monitoring}).encode()).metrics


def test_without_monitoring_every_family_is_served_at_metrics() -> None:
    assert parse_config(json.dumps(MODELS).encode()).metrics == MetricsConfig(True, (), "/metrics")
    assert _parsed({}) == MetricsConfig(True, (), "/metrics")


def test_a_metrics_block_follows_ovms_enable_defaults_to_false() -> None:
    assert _parsed({"metrics": {}}).enabled is False
    assert _parsed(
        {
            "metrics": {
                "enable": True,
                "metrics_list": ["ovms_streams"],
                "endpoint_path": "/newmetrics",
            }
        }
    ) == MetricsConfig(True, ("ovms_streams",), "/newmetrics")
    assert _parsed({"metrics": {"enable": True, "metrics_list": ALL_OVMS}}).families == tuple(
        ALL_OVMS
    )


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        (
            {"enable": True, "metrics_list": ["ovms_bogus"]},
            "monitoring.metrics.metrics_list: Metrics family name not supported: ovms_bogus",
        ),
        (
            {"enable": True, "metrics_list": "ovms_streams"},
            "monitoring.metrics.metrics_list: expected a list of metric names",
        ),
        (
            {"enable": True, "endpoint_path": "/a/b"},
            "monitoring.metrics.endpoint_path: '/a/b' is not a valid endpoint path",
        ),
        ({"enable": "yes"}, "monitoring.metrics.enable"),
        ({"enabled": True}, "monitoring.metrics"),
    ],
)
def test_bad_monitoring_is_a_config_error_naming_the_field(
    metrics: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        _parsed({"metrics": metrics})


def test_flags_and_env_follow_ovms_rules() -> None:
    assert metrics_from_flags(None, "") == MetricsConfig()
    assert metrics_from_flags(False, "").enabled is False
    assert metrics_from_flags(True, "ovms_streams, ovms_requests_fail").families == (
        "ovms_streams",
        "ovms_requests_fail",
    )
    with pytest.raises(
        ConfigError,
        match="metrics_enable setting is missing, required when metrics_list is provided",
    ):
        metrics_from_flags(None, "ovms_streams")
    env = {"OVS_METRICS_ENABLE": "1", "OVS_METRICS_LIST": "ovms_streams"}
    assert Settings.from_env(env).metrics == MetricsConfig(True, ("ovms_streams",))
    assert Settings.from_env({"OVS_METRICS_ENABLE": "0"}).metrics.enabled is False


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    yield write_demo_repository(tmp_path / "models")


def _app(config: Path, monitoring: Any, settings: MetricsConfig = DEFAULT) -> App:
    config.write_text(json.dumps({**MODELS, "monitoring": monitoring}))
    options = Settings(
        config_path=str(config), cache_dir=str(config.parent / "cache"), metrics=settings
    )
    return App(ModelManager.start(options), options)


def _get(app: App, path: str, method: str = "GET") -> tuple[int, bytes]:
    response = app.handle(make_request(method, path, b""))
    return response.status, response.body


def _families(body: bytes) -> list[str]:
    return re.findall(r"^# TYPE (\S+) ", body.decode(), re.M)


def _predict(app: App) -> int:
    body = json.dumps({"instances": [[1.0, 2.0, 3.0, 4.0]]}).encode()
    return app.handle(make_request("POST", "/v1/models/scaler:predict", body)).status


def test_disabled_metrics_have_no_endpoint_and_models_still_serve(repo: Path) -> None:
    app = _app(repo, {"metrics": {"enable": False}})
    status, body = _get(app, "/metrics")
    assert (status, json.loads(body)) == (404, {"error": "Invalid request URL: /metrics"})
    assert _predict(app) == 200


def test_a_metrics_list_and_endpoint_path_serve_only_those_families_there(repo: Path) -> None:
    app = _app(
        repo,
        {
            "metrics": {
                "enable": True,
                "endpoint_path": "/newmetrics",
                "metrics_list": ["ovms_requests_success", "ovms_streams"],
            }
        },
    )
    assert _predict(app) == 200
    status, body = _get(app, "/newmetrics")
    assert status == 200
    assert _families(body) == ["ovms_requests_success", "ovms_streams"]
    assert (
        'ovms_requests_success{api="TensorFlowServing",interface="REST",method="Predict",'
        'name="scaler",version="1"}' in body.decode()
    )
    assert _get(app, "/metrics")[0] == 404
    assert _get(app, "/newmetrics", "POST")[0] == 405


def test_the_config_files_monitoring_wins_over_the_flags(repo: Path) -> None:
    app = _app(repo, {"metrics": {"enable": True}}, MetricsConfig(enabled=False))
    assert _get(app, "/metrics")[0] == 200
    app = _app(repo, None, MetricsConfig(enabled=False))
    assert _get(app, "/metrics")[0] == 404


def test_a_config_reload_turns_metrics_off_and_on(repo: Path) -> None:
    app = _app(repo, None)
    assert _get(app, "/metrics")[0] == 200
    repo.write_text(json.dumps({**MODELS, "monitoring": {"metrics": {"enable": False}}}))
    assert _get(app, "/v1/config/reload", "POST")[0] == 200
    assert _get(app, "/metrics")[0] == 404
    assert _predict(app) == 200


def _invoke(repo: Path, *flags: str) -> int:
    return cli.main(
        [
            "invoke",
            "GET",
            "/metrics",
            "--model_name",
            "scaler",
            "--model_path",
            str(repo.parent / "scaler"),
            "--cache_dir",
            str(repo.parent / "cache"),
            "--log_level",
            "WARNING",
            *flags,
        ]
    )


def test_the_ovms_metrics_flags(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _invoke(repo, "--metrics_enable", "--metrics_list", "ovms_streams") == 0
    assert _families(capsys.readouterr().out.encode()) == ["ovms_streams"]
    assert _invoke(repo, "--metrics_enable=false") == 1
    assert "Invalid request URL: /metrics" in capsys.readouterr().out
    assert _invoke(repo, "--metrics_list", "ovms_streams") == cli.EX_USAGE
    assert capsys.readouterr().err.strip() == (
        "ov-serverless: metrics_enable setting is missing, required when metrics_list is provided"
    )
    assert _invoke(repo, "--metrics_enable", "--metrics_list", "ovms_nope") == cli.EX_USAGE
    assert "Metrics family name not supported: ovms_nope" in capsys.readouterr().err
