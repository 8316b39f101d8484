"""`ov-serverless` command line: serve | invoke | export-blobs | demo-repo | package.

Flags follow OVMS (`--config_path`, `--model_name`, `--model_path`, `--port`, `--rest_port`,
...); each is declared once, with its env variable, in core.config.table, and its text is
checked by the same code as the variable's. With no model flags and no OVS_* env, `serve`
builds and serves the bundled demo model.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

from core import logs
from core.config import Settings
from core.config.docs import NONE, shown_default
from core.config.options import BOOL
from core.config.table import SERVER, TABLE, Setting, flagged
from core.errors import ConfigError

EX_USAGE = 64  # sysexits.h; OVMS exits with it on a bad command line
DEMO_ROOT = Path(os.environ.get("OVS_DEMO_DIR", Path.home() / ".cache" / "ov-serverless" / "demo"))
_BOOL_WORDS = ("true", "false", "1", "0", "yes", "no")
_BOOL_FLAGS = frozenset(setting.flag for setting in TABLE if setting.kind is BOOL and setting.flag)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(_explicit_bools(sys.argv[1:] if argv is None else argv))
    try:
        return _run(args)
    except ConfigError as exc:  # a usage mistake: the message, as OVMS prints it, no traceback
        print(f"ov-serverless: {exc}", file=sys.stderr)
        return EX_USAGE


def _run(args: argparse.Namespace) -> int:
    _server_values(args)
    if args.command == "serve":
        _check_ports(args)
    try:
        args.log_level = _log_level(args.log_level)
        logs.configure(args.log_level, args.log_path)
    except OSError as exc:
        print(
            f"ov-serverless: cannot open log_path {args.log_path}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return EX_USAGE
    if args.command == "package":
        from handlers.package import main as package

        return package(args)
    if args.command == "demo-repo":
        from demo.models import write_demo_repository

        print(write_demo_repository(Path(args.path)))
        return 0
    settings = _settings(args)
    if args.command == "invoke":
        return _invoke(settings, args)
    if args.command == "export-blobs":
        from handlers.export_blobs import main as export_blobs

        return export_blobs(settings, args)
    return _serve(settings, args)


def _log_level(flag: str | None) -> str:
    """--log_level, else OVS_LOG_LEVEL (an unknown value: INFO, with a warning), else INFO."""
    if flag:
        return flag
    env = os.environ.get("OVS_LOG_LEVEL", "").strip().upper()
    if env and env not in logs.LEVELS:
        print(
            f"ov-serverless: OVS_LOG_LEVEL {env!r} is not one of {', '.join(logs.LEVELS)}: INFO",
            file=sys.stderr,
        )
    return env if env in logs.LEVELS else "INFO"


class _Parser(argparse.ArgumentParser):
    """argparse's usage errors (an unknown flag, a value not among its choices) exit with
    EX_USAGE, as OVMS does and as a bad flag value does here, not with argparse's 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EX_USAGE, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ov-serverless", description=__doc__)
    parser.add_argument("--version", action=_Version, help="print the versions and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {
        "serve": sub.add_parser("serve", help="serve REST (and gRPC with --port) until SIGTERM"),
        "invoke": sub.add_parser("invoke", help="run one request through the router in-process"),
        "export-blobs": sub.add_parser(
            "export-blobs",
            help="load every model and write its "
            "compiled blob to OUT, for OVS_COMPILED_CACHE or the "
            "bucket",
        ),
        "demo-repo": sub.add_parser("demo-repo", help="write the demo model repository to PATH"),
        "package": sub.add_parser("package", help="build a deployment package: lambda-zip OUT.zip"),
    }
    commands["serve"].add_argument("--version", action=_Version, help="print the versions and exit")
    invoke = commands["invoke"]
    invoke.add_argument("method")
    invoke.add_argument("path")
    invoke.add_argument("--data", default="", help="request body, or @file")
    invoke.add_argument("--header", action="append", default=[], help="'Name: value'")
    _export_flags(commands["export-blobs"])
    commands["demo-repo"].add_argument("path")
    _package_flags(commands["package"])
    for command, child in commands.items():
        for setting in flagged(command):
            child.add_argument(setting.flag, dest=setting.name, **_flag_options(setting))
    return parser


def _flag_options(setting: Setting) -> dict[str, Any]:
    """argparse keeps each flag's text (checked later, as its variable's); a bool flag alone
    means true (`--stateful`, `--stateful false`, `--stateful=false`)."""
    options: dict[str, Any] = {"help": _help(setting), "metavar": setting.flag[2:].upper()}
    if setting.target == SERVER:  # read by the command line alone: no env variable to consult
        options["default"] = setting.default
    if setting.kind is BOOL:
        options.update(nargs="?", const="true", metavar="true|false")
    if setting.choices:
        options.update(type=str.upper, choices=setting.choices, metavar=None)
    return options


def _help(setting: Setting) -> str:
    default = shown_default(setting)
    where = ", ".join(
        filter(
            None,
            (
                f"env {setting.env}" if setting.env else "",
                f"default {default}" if default != NONE else "",
            ),
        )
    )
    return f"{setting.doc} ({where})" if where else setting.doc


class _Version(argparse.Action):
    """OVMS's --version: this server's version, then its OpenVINO's (imported only here)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from importlib.metadata import version

        import openvino

        print(
            f"ov-serverless {version('ov-serverless')}\nOpenVINO backend {openvino.get_version()}"
        )
        parser.exit()


def _export_flags(parser: argparse.ArgumentParser) -> None:
    from handlers.export_blobs import add_arguments

    add_arguments(parser)


def _package_flags(parser: argparse.ArgumentParser) -> None:
    from handlers.package import add_arguments

    add_arguments(parser)


def _explicit_bools(argv: list[str]) -> list[str]:
    """A bool flag takes the next word as its value only when that word is a bool (`--stateful
    false`): `--stateful GET /v1/...` is the flag and two positionals, which argparse alone
    would read as `--stateful=GET`. So each bool flag is rewritten as `--flag=value`."""
    out: list[str] = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        index += 1
        if arg not in _BOOL_FLAGS:
            out.append(arg)
        elif index < len(argv) and argv[index].lower() in _BOOL_WORDS:
            out.append(f"{arg}={argv[index]}")
            index += 1
        else:
            out.append(f"{arg}=true")
    return out


def _flags(args: argparse.Namespace) -> dict[str, str]:
    """The text of each settings flag given on the command line, by setting name."""
    return {
        setting.name: getattr(args, setting.name)
        for setting in flagged(args.command)
        if setting.target != SERVER and getattr(args, setting.name) is not None
    }


def _server_values(args: argparse.Namespace) -> None:
    """The flags only the command line reads (--port, --log_path, ...): the text given, in
    `args`, parsed as every flag is (their defaults are argparse's)."""
    for setting in flagged(args.command):
        text = getattr(args, setting.name)
        if setting.target == SERVER and isinstance(text, str):
            setattr(args, setting.name, setting.kind.parse(text, setting.flag))


def _check_ports(args: argparse.Namespace) -> None:
    """OVMS refuses no port at all, and one port for both servers, before it starts anything."""
    if not args.rest_port and not args.port:
        raise ConfigError("port and rest_port cannot both be unset")
    if args.port and args.port == args.rest_port:
        raise ConfigError(f"--port and --rest_port cannot be the same port: {args.port}")


def _settings(args: argparse.Namespace) -> Settings:
    defaults: dict[str, Any] = {}
    overrides: dict[str, Any] = {}
    if args.command == "serve":  # OVMS's poll for long-running servers; adaptive LATENCY/THROUGHPUT
        defaults.update(reload_interval=1.0, concurrent=True)
    if args.command == "export-blobs":  # compile now; write only to OUT
        overrides.update(lazy_load=False, export_blobs=False)
    settings = Settings.from_env(os.environ, _flags(args), defaults, **overrides)
    if not (
        settings.config_path or settings.model_path or settings.model_name or settings.model_options
    ):  # a model flag alone: Settings.server_config names what is missing
        settings = _demo_settings(settings)
    return settings


def _demo_settings(settings: Settings) -> Settings:
    from dataclasses import replace

    from demo.models import write_demo_repository

    config = DEMO_ROOT / "config.json"
    if not config.is_file():
        write_demo_repository(DEMO_ROOT)
    print(f"No model configured: serving the demo model repository at {DEMO_ROOT}", file=sys.stderr)
    return replace(settings, config_path=str(config))


def _invoke(settings: Settings, args: argparse.Namespace) -> int:
    from core.api import App, make_request
    from core.serving.registry import ModelManager

    body, headers = _invoke_body(args.data), _invoke_headers(args.header)
    app = App(ModelManager.start(settings), settings)
    response = app.handle(make_request(args.method, args.path, body, headers))
    sys.stdout.buffer.write(response.body + b"\n")
    return 0 if response.status < 400 else 1


def _invoke_body(data: str) -> bytes:
    """--data: the body, or `@file` for a file's bytes."""
    if not data.startswith("@"):
        return data.encode()
    try:
        return Path(data[1:]).read_bytes()
    except OSError as exc:
        raise ConfigError(f"--data: cannot read {data[1:]}: {exc.strerror or exc}") from None


def _invoke_headers(lines: list[str]) -> dict[str, str]:
    """--header 'Name: value', repeated."""
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise ConfigError(f"--header: expected 'Name: value', got {line!r}")
        headers[name.strip()] = value.strip()
    return headers


def _serve(settings: Settings, args: argparse.Namespace) -> int:
    from handlers.server import serve

    return serve(settings, args)


if __name__ == "__main__":
    sys.exit(main())
