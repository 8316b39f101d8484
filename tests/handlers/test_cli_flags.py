"""`ov-serverless` bool, integer and JSON flags as `--help` shows them and as OVMS users type
them, validated by the same code and with the same text as their OVS_* variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from demo import models
from handlers import cli
from tests.core.helpers import save_ir


@pytest.fixture(scope="module")
def scaler(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli-flags")
    save_ir(models.scaler(2.0), root / "scaler" / "1")
    return root


def invoke(scaler: Path, *words: str, method: str = "GET", path: str = "/metrics") -> int:
    """`ov-serverless invoke [words] METHOD PATH --model_path ...`: the flags come first, so a
    bare bool flag stands right before the positionals."""
    return cli.main(
        [
            "invoke",
            *words,
            method,
            path,
            "--model_name",
            "scaler",
            "--model_path",
            str(scaler / "scaler"),
            "--cache_dir",
            str(scaler / "cache"),
            "--log_level",
            "WARNING",
        ]
    )


def settings(*words: str) -> object:
    args = cli._parser().parse_args(
        cli._explicit_bools(
            ["invoke", "GET", "/", "--model_name", "m", "--model_path", "/m", *words]
        )
    )
    return cli._settings(args)


@pytest.mark.parametrize(
    "words,served",
    [
        (("--metrics_enable",), True),
        (("--metrics_enable", "true"), True),
        (("--metrics_enable", "false"), False),
        (("--metrics_enable=true",), True),
        (("--metrics_enable=false",), False),
        (("--metrics_enable", "FALSE"), False),
    ],
)
def test_metrics_enable_forms(
    scaler: Path, capsys: pytest.CaptureFixture[str], words: tuple[str, ...], served: bool
) -> None:
    assert invoke(scaler, *words) == (0 if served else 1)
    assert ("# TYPE ovms_streams gauge" in capsys.readouterr().out) is served


@pytest.mark.parametrize(
    "words,expected",
    [
        (("--allow_credentials",), True),
        (("--allow_credentials", "true"), True),
        (("--allow_credentials", "false"), False),
        (("--allow_credentials=true",), True),
        ((), False),
    ],
)
def test_allow_credentials_forms(words: tuple[str, ...], expected: bool) -> None:
    assert settings(*words).cors.credentials is expected  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "words,stateful",
    [
        (("--stateful",), True),
        (("--stateful", "true"), True),
        (("--stateful", "false"), False),
        (("--stateful=false",), False),
        (("--stateful", "--nireq", "2"), True),
    ],
)
def test_stateful_forms(words: tuple[str, ...], stateful: bool) -> None:
    options = settings(*words).model_options  # type: ignore[attr-defined]
    assert options["stateful"] is stateful


def test_a_bare_bool_flag_leaves_the_positionals_alone(
    scaler: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        invoke(scaler, "--metrics_enable", method="POST", path="/v1/models/scaler:predict") == 1
    )  # no body: a 4xx, not a usage error
    assert "error" in capsys.readouterr().out
    assert invoke(scaler, "--allow_credentials", "--metrics_enable") == 0
    assert "ovms_streams" in capsys.readouterr().out


def _usage_error(capsys: pytest.CaptureFixture[str], code: int) -> str:
    assert code == cli.EX_USAGE
    err = capsys.readouterr().err.strip()
    assert err.startswith("ov-serverless: ") and "Traceback" not in err, err
    return err.removeprefix("ov-serverless: ")


@pytest.mark.parametrize(
    "flag,env,value,problem",
    [
        ("--plugin_config", "OVS_PLUGIN_CONFIG", "{bad", "not valid JSON: "),
        ("--model_version_policy", "OVS_MODEL_VERSION_POLICY", "{bad", "not valid JSON: "),
        ("--dynamic_batching", "OVS_DYNAMIC_BATCHING", "[1,", "not valid JSON: "),
        ("--nireq", "OVS_NIREQ", "two", "expected an integer, got 'two'"),
        ("--max_request_bytes", "OVS_MAX_REQUEST_BYTES", "1MB", "expected an integer, got '1MB'"),
        ("--metrics_enable", "OVS_METRICS_ENABLE", "maybe", "expected true or false, got 'maybe'"),
    ],
)
def test_a_bad_flag_and_a_bad_env_value_give_the_same_clean_error(
    scaler: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    flag: str,
    env: str,
    value: str,
    problem: str,
) -> None:
    from_flag = _usage_error(capsys, invoke(scaler, f"{flag}={value}"))
    monkeypatch.setenv(env, value)
    from_env = _usage_error(capsys, invoke(scaler))
    assert from_flag.startswith(f"{flag}: {problem}"), from_flag
    assert from_env == f"{env}:{from_flag.removeprefix(flag + ':')}"


def test_a_bad_bool_flag_value_is_a_clean_error(
    scaler: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    message = _usage_error(capsys, invoke(scaler, "--stateful=maybe"))
    assert message == "--stateful: expected true or false, got 'maybe'"


def test_plugin_config_as_two_words(scaler: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The form of the report: `--plugin_config '{bad'`."""
    message = _usage_error(capsys, invoke(scaler, "--plugin_config", "{bad"))
    assert message.startswith("--plugin_config: not valid JSON: "), message


@pytest.mark.parametrize(
    "env,value,problem",
    [
        ("OVS_LAZY_LOAD", "sometimes", "expected true or false, got 'sometimes'"),
        ("OVS_CONCURRENT", "on", "expected true or false, got 'on'"),
        ("OVS_EXPORT_BLOBS", "2", "expected true or false, got '2'"),
        ("OVS_ALLOW_CREDENTIALS", "y", "expected true or false, got 'y'"),
        ("OVS_RELOAD_INTERVAL", "5s", "expected a number, got '5s'"),
    ],
)
def test_a_bad_env_value_is_a_clean_error(
    scaler: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    env: str,
    value: str,
    problem: str,
) -> None:
    monkeypatch.setenv(env, value)
    assert _usage_error(capsys, invoke(scaler)) == f"{env}: {problem}"


@pytest.mark.parametrize(
    "flag,value,problem",
    [
        ("--port", "70000", "expected a port number (0-65535), got '70000'"),
        ("--rest_port", "-1", "expected a port number (0-65535), got '-1'"),
        ("--metrics_port", "65536", "expected a port number (0-65535), got '65536'"),
        ("--rest_workers", "-1", "expected an integer >= 0, got '-1'"),
        ("--grpc_workers", "-2", "expected an integer >= 0, got '-2'"),
        ("--file_system_poll_wait_seconds", "-1", "expected a number >= 0, got '-1'"),
        ("--shutdown_grace_seconds", "-5", "expected a number >= 0, got '-5'"),
    ],
)
def test_an_out_of_range_server_flag_is_a_clean_error_before_serving(
    capsys: pytest.CaptureFixture[str], flag: str, value: str, problem: str
) -> None:
    """OVMS exits on a port out of range or a negative count; we neither serve a bogus port,
    nor fail deep in a socket or a thread pool with a traceback, nor take it as `0`."""
    message = _usage_error(capsys, cli.main(["serve", "--log_level", "ERROR", flag, value]))
    assert message == f"{flag}: {problem}"


def test_the_same_port_for_grpc_and_rest_is_a_clean_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """OVMS refuses `--port` equal to `--rest_port` before it starts anything."""
    message = _usage_error(capsys, cli.main(["serve", "--port", "9000", "--rest_port", "9000"]))
    assert message == "--port and --rest_port cannot be the same port: 9000"


def test_a_model_flag_without_a_model_is_not_blamed_on_a_config_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--nireq 2` alone is a missing --model_path, not the bundled demo's config file (which
    the user never gave) clashing with a model flag."""
    monkeypatch.setattr(cli, "DEMO_ROOT", tmp_path / "demo")
    message = _usage_error(capsys, invoke_alone("--nireq", "2"))
    assert message.startswith("No models configured: set --config_path or --model_name"), message
    assert not (tmp_path / "demo").exists()


def invoke_alone(*words: str) -> int:
    return cli.main(["invoke", "GET", "/v1/config", "--log_level", "ERROR", *words])


def test_log_level_trace_is_taken_as_ovms_takes_it(scaler: Path) -> None:
    """OVMS's --log_level takes TRACE (and OVS_LOG_LEVEL=TRACE is taken): debug lines here."""
    import logging

    root = logging.getLogger()
    before = root.level, root.handlers[:]
    try:
        code = cli.main(
            ["invoke", "GET", "/v1/config", "--model_path", str(scaler / "scaler")]
            + ["--cache_dir", str(scaler / "cache"), "--log_level", "trace"]
        )
        assert (code, root.level) == (0, logging.DEBUG)
    finally:
        root.setLevel(before[0])
        root.handlers[:] = before[1]


@pytest.mark.parametrize(
    "words,problem",
    [
        (("--grpc_memory_quota", "100"), "unrecognized arguments: --grpc_memory_quota 100"),
        (("--log_level", "LOUD"), "argument --log_level: invalid choice: 'LOUD'"),
    ],
)
def test_a_flag_argparse_refuses_exits_64_as_ovms_does(
    capsys: pytest.CaptureFixture[str], words: tuple[str, ...], problem: str
) -> None:
    """A command line argparse refuses is the same usage error as a bad value: exit 64
    (OVMS's EX_USAGE), not argparse's 2, with the usage and one line naming the flag."""
    with pytest.raises(SystemExit) as exited:
        cli.main(["serve", *words])
    assert exited.value.code == cli.EX_USAGE
    err = capsys.readouterr().err
    assert problem in err and "Traceback" not in err, err


def test_no_port_at_all_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """`--rest_port 0` without `--port`: nothing to serve; exit 64 with the one line, as any
    usage mistake, before any model loads."""
    message = _usage_error(capsys, cli.main(["serve", "--rest_port", "0"]))
    assert message == "port and rest_port cannot both be unset"


@pytest.mark.parametrize(
    "words,problem",
    [
        (("--header", "nocolon"), "--header: expected 'Name: value', got 'nocolon'"),
        (("--data", "@/nonexistent/body.json"), "--data: cannot read /nonexistent/body.json: "),
    ],
)
def test_a_bad_invoke_argument_is_a_clean_error(
    scaler: Path, capsys: pytest.CaptureFixture[str], words: tuple[str, ...], problem: str
) -> None:
    message = _usage_error(capsys, invoke(scaler, *words))
    assert message.startswith(problem), message
