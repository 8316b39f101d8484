"""config.json parsing (core.config.parse_config): what a valid file becomes, and every mistake
reported as a ConfigError that names the JSON path of the offending field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from core.config import ModelConfig, Settings, VersionPolicy, parse_config
from core.errors import ConfigError


def config(**fields: Any) -> bytes:
    entry = {"name": "m", "base_path": "models/m", **fields}
    return json.dumps({"model_config_list": [{"config": entry}]}).encode()


def parse_one(raw: bytes) -> ModelConfig:
    (model,) = parse_config(raw, "/srv/config.json").models
    return model


def test_a_full_entry() -> None:
    model = parse_one(
        config(
            batch_size="auto",
            nireq=2,
            target_device="CPU",
            layout="NHWC:NCHW",
            model_version_policy={"specific": {"versions": [1, 3]}},
            plugin_config={"NUM_STREAMS": "1", "PERF_COUNT": False},
            shape="(1,3,224,224)",
        )
    )
    assert model.name == "m"
    assert model.base_path == "/srv/models/m"  # relative to the config file's folder
    assert model.version_policy == VersionPolicy("specific", versions=(1, 3))
    assert model.nireq == 2
    assert model.layout == "NHWC:NCHW"
    assert model.shape == ((1, 1), (3, 3), (224, 224), (224, 224))
    assert model.batch_size == "auto"  # reloads to fit a request (core.runtime.auto_shape)
    assert dict(model.plugin_config) == {"NUM_STREAMS": "1", "PERF_COUNT": False}


def test_defaults() -> None:
    model = parse_one(config())
    assert model.version_policy == VersionPolicy("latest", num_versions=1)
    assert (model.nireq, model.target_device, model.batch_size, model.shape) == (
        0,
        "CPU",
        None,
        None,
    )


def test_absolute_and_url_base_paths_are_kept() -> None:
    assert parse_one(config(base_path="/abs/m")).base_path == "/abs/m"
    assert parse_one(config(base_path="s3://bucket/m")).base_path == "s3://bucket/m"


@pytest.mark.parametrize(
    ("policy", "served"),
    [
        ({"all": {}}, [1, 2, 3, 7]),
        ({"latest": {"num_versions": 2}}, [3, 7]),
        ({"latest": {}}, [7]),
        ({"specific": {"versions": [1, 3, 9]}}, [1, 3]),
    ],
)
def test_version_policies_select(policy: dict[str, Any], served: list[int]) -> None:
    model = parse_one(config(model_version_policy=policy))
    assert model.version_policy.select([3, 1, 7, 2]) == served


def test_several_models() -> None:
    raw = json.dumps(
        {
            "model_config_list": [
                {"config": {"name": "a", "base_path": "/a"}},
                {"config": {"name": "b", "base_path": "/b", "batch_size": 4}},
            ]
        }
    ).encode()
    parsed = parse_config(raw)
    assert [m.name for m in parsed.models] == ["a", "b"]
    assert parsed.models[1].batch_size == (4, 4)


BAD = [
    ("invalid-json", b'{"model_config_list": [', "Configuration file is not a valid JSON file"),
    ("not-an-object", b"[]", "$: expected a JSON object"),
    ("missing-list", b"{}", "model_config_list: required"),
    ("unknown-top-level", b'{"model_config_list": [], "models": []}', "models: unknown field"),
    (
        "unknown-entry-key",
        b'{"model_config_list": [{"config": {"name": "m", "base_path": "m"}, "extra": 1}]}',
        "model_config_list[0].extra: unknown field",
    ),
    ("unknown-field", config(colour="red"), "model_config_list[0].config.colour: unknown field"),
    (
        "missing-name",
        json.dumps({"model_config_list": [{"config": {"base_path": "m"}}]}).encode(),
        "model_config_list[0].config.name: required",
    ),
    (
        "missing-base-path",
        json.dumps({"model_config_list": [{"config": {"name": "m"}}]}).encode(),
        "model_config_list[0].config.base_path: required",
    ),
    (
        "nireq-not-int",
        config(nireq="many"),
        "model_config_list[0].config.nireq: expected an integer",
    ),
    ("nireq-negative", config(nireq=-1), "model_config_list[0].config.nireq: must be >= 0"),
    (
        "policy-unknown-key",
        config(model_version_policy={"newest": {}}),
        "model_config_list[0].config.model_version_policy: Model version policy contains "
        "unsupported key",
    ),
    (
        "policy-two-keys",
        config(model_version_policy={"all": {}, "latest": {}}),
        "model_config_list[0].config.model_version_policy: Model version policy is in wrong format",
    ),
    (
        "policy-zero-latest",
        config(model_version_policy={"latest": {"num_versions": 0}}),
        "model_config_list[0].config.model_version_policy.latest.num_versions: must be >= 1",
    ),
    (
        "policy-empty-specific",
        config(model_version_policy={"specific": {"versions": []}}),
        "model_config_list[0].config.model_version_policy.specific.versions: required",
    ),
    (
        "policy-bad-version",
        config(model_version_policy={"specific": {"versions": [1, "x"]}}),
        "model_config_list[0].config.model_version_policy.specific.versions[1]: expected an "
        "integer",
    ),
    (
        "policy-extra-key",
        config(model_version_policy={"all": {"x": 1}}),
        "model_config_list[0].config.model_version_policy.all.x: unknown field",
    ),
    (
        "bad-shape",
        config(shape="(1,x,3)"),
        "model_config_list[0].config.shape[1]: invalid dimension",
    ),
    (
        "bad-batch",
        config(batch_size="big"),
        "model_config_list[0].config.batch_size: invalid dimension",
    ),
    ("bad-layout", config(layout=5), "model_config_list[0].config.layout: expected a layout"),
    (
        "bad-plugin-config",
        config(plugin_config={"A": [1]}),
        "model_config_list[0].config.plugin_config.A: expected a string, number or boolean",
    ),
    (
        "bad-bool",
        config(allow_cache="maybe"),
        "model_config_list[0].config.allow_cache: expected true or false",
    ),
]


@pytest.mark.parametrize(
    ("raw", "message"), [(raw, msg) for _, raw, msg in BAD], ids=[case for case, _, _ in BAD]
)
def test_config_errors_name_the_json_path(raw: bytes, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw, "/srv/config.json")
    assert caught.value.message.startswith(message), caught.value.message


def test_duplicated_name_names_the_second_entry() -> None:
    raw = json.dumps(
        {
            "model_config_list": [
                {"config": {"name": "m", "base_path": "a"}},
                {"config": {"name": "m", "base_path": "b"}},
            ]
        }
    ).encode()
    with pytest.raises(ConfigError, match=r"^model_config_list\[1\]\.config\.name: .*duplicated"):
        parse_config(raw)


@pytest.mark.parametrize(
    "env", [{"OVS_NIREQ": "4"}, {"OVS_PLUGIN_CONFIG": '{"PERFORMANCE_HINT": "THROUGHPUT"}'}]
)
def test_single_model_knobs_with_a_config_file_are_refused(env: dict[str, str]) -> None:
    """OVMS exits on --nireq etc. next to --config_path; ignoring them silently would serve
    with settings the deployer did not get."""
    settings = Settings.from_env({"OVS_CONFIG_PATH": "/srv/config.json", **env})
    with pytest.raises(
        ConfigError,
        match="Model parameters in CLI are exclusive with the "
        f"config file: {next(iter(env))[4:].lower()}",
    ):
        settings.server_config()


def test_the_cli_prints_a_usage_mistake_and_exits_64(capsys: pytest.CaptureFixture[str]) -> None:
    from handlers import cli

    code = cli.main(
        ["invoke", "GET", "/v1/config", "--config_path", "/srv/config.json", "--nireq", "2"]
    )
    assert code == 64
    assert capsys.readouterr().err == (
        "ov-serverless: Model parameters in CLI are exclusive "
        "with the config file: nireq (set them per model in "
        "the config)\n"
    )


@pytest.mark.parametrize(
    "path",
    [
        "https://acct.blob.core.windows.net/models/resnet?sv=2022-11-02&sig=SECRET",
        "s3://bucket/models/resnet/?X-Amz-Signature=SECRET",
        "az://models/resnet#SECRET",
    ],
)
def test_a_model_named_after_its_url_is_named_without_the_query(path: str) -> None:
    """Without --model_name the model takes its folder's name: the query (a SAS) must not
    become the model's name, shown in every log line, status and /metrics label."""
    (model,) = Settings(model_path=path).server_config().models
    assert model.name == "resnet"


def test_a_layout_map_given_as_a_flag_is_read_as_json() -> None:
    """OVMS takes `--layout '{"input1":"NHWC:NCHW"}'` for a model of several inputs, as it
    takes `--shape '{...}'`: the map, not one layout string starting with a brace."""
    flags = {"model_path": "/models/m", "layout": '{"in1": "NHWC:NCHW", "out": "CN:NC"}'}
    (model,) = Settings.from_env({}, flags).server_config().models
    assert model.layout == {"in1": "NHWC:NCHW", "out": "CN:NC"}


def test_a_broken_layout_map_is_a_config_error() -> None:
    flags = {"model_path": "/models/m", "layout": '{"in1": "NHWC:NCHW"'}
    with pytest.raises(ConfigError, match=r"^model\.layout: not valid JSON"):
        Settings.from_env({}, flags).server_config()
