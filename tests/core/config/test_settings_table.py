"""The settings table (core.config.table) is the one declaration of every setting: the README's
table, the CLI's flags and Settings.from_env all come from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import Settings
from core.config.docs import with_table
from core.config.model_entry import MODEL_KEYS
from core.config.table import MODEL_OPTION, TABLE, Setting, flagged
from core.errors import ConfigError
from handlers import cli

README = Path(__file__).resolve().parents[3] / "README.md"


def test_the_readme_table_is_the_generated_one() -> None:
    text = README.read_text()
    assert with_table(text) == text, "run: python -m core.config.docs README.md"


def test_each_command_takes_its_flags() -> None:
    parser = cli._parser()
    commands = {
        "serve": [],
        "invoke": ["GET", "/"],
        "export-blobs": ["out"],
        "demo-repo": ["path"],
        "package": ["lambda-zip", "out.zip"],
    }
    for command, positionals in commands.items():
        for setting in flagged(command):
            args = parser.parse_args([command, *positionals, f"{setting.flag}=DEBUG"])
            assert getattr(args, setting.name) == "DEBUG", (command, setting.flag)


def test_names_flags_and_variables_are_unique() -> None:
    for attribute in ("name", "flag", "env"):
        values = [getattr(setting, attribute) for setting in TABLE if getattr(setting, attribute)]
        assert len(values) == len(set(values)), attribute


def test_every_model_option_is_a_config_json_field() -> None:
    for setting in TABLE:
        if setting.target == MODEL_OPTION:
            assert setting.field in MODEL_KEYS, setting.name


_SAMPLE = {"bool": "true", "integer": "3", "JSON": "{}"}


@pytest.mark.parametrize(
    "setting", [s for s in TABLE if s.target == MODEL_OPTION], ids=lambda s: s.name
)
def test_every_model_option_reads_its_flag_and_its_variable(setting: Setting) -> None:
    """The same value from `--name` and from `OVS_NAME`; a stateful-only knob is refused
    alike without `stateful`."""
    text = _SAMPLE.get(setting.kind.name, "x")
    try:
        from_env = Settings.from_env({setting.env: text}).model_options
        from_flag = Settings.from_env({}, {setting.name: text}).model_options
    except ConfigError as exc:
        assert "require setting stateful flag" in exc.message
        with pytest.raises(ConfigError, match="require setting stateful flag"):
            Settings.from_env({}, {setting.name: text})
        from_env = Settings.from_env({setting.env: text, "OVS_STATEFUL": "1"}).model_options
        from_flag = Settings.from_env({}, {setting.name: text, "stateful": "1"}).model_options
    assert from_env == from_flag and setting.name in from_env


def test_server_flags_are_typed_and_checked_as_every_flag() -> None:
    args = cli._parser().parse_args(
        [
            "serve",
            "--port",
            "9000",
            "--grpc_channel_arguments",
            "a=1,b=x",
            "--model_name",
            "m",
            "--model_path",
            "/m",
        ]
    )
    cli._server_values(args)
    assert (args.port, args.rest_port, args.grpc_channel_arguments, args.log_path) == (
        9000,
        8000,
        [("a", 1), ("b", "x")],
        "",
    )
    assert cli._settings(args).model_name == "m"  # the server's values are not settings
    bad = cli._parser().parse_args(["serve", "--port", "x"])
    with pytest.raises(ConfigError, match="^--port: expected an integer, got 'x'$"):
        cli._server_values(bad)


def test_a_flag_wins_over_its_variable_knob_by_knob() -> None:
    settings = Settings.from_env({"OVS_NIREQ": "2", "OVS_BATCH_SIZE": "4"}, {"nireq": "3"})
    assert settings.model_options == {"nireq": 3, "batch_size": "4"}


def test_an_empty_value_is_not_given_except_in_the_cors_lists() -> None:
    settings = Settings.from_env({"OVS_CACHE_DIR": "", "OVS_NIREQ": "", "OVS_ALLOWED_ORIGINS": ""})
    assert (settings.cache_dir, settings.model_options) == ("/tmp/ov-cache", {})
    assert settings.cors.origins == ()


def test_a_command_default_yields_to_the_variable() -> None:
    """`serve` polls every second unless OVS_RELOAD_INTERVAL says otherwise."""
    serve = {"reload_interval": 1.0}
    assert Settings.from_env({}, defaults=serve).reload_interval == 1.0
    assert Settings.from_env({"OVS_RELOAD_INTERVAL": "0"}, defaults=serve).reload_interval == 0.0
