"""`ov-serverless` command line: serve | invoke | export-blobs | demo-repo | package.

Flags follow OVMS (`--config_path`, `--model_name`, `--model_path`, `--port`, `--rest_port`,
...). With no model flags and no OVS_* env, `serve` builds and serves the bundled demo model.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from core import logs
from core.config import (
    Settings,
    cors_from_env,
    metrics_from_flags,
    minutes_setting,
    option_bool,
    option_int,
    option_json,
)
from core.errors import ConfigError

EX_USAGE = 64  # sysexits.h; OVMS exits with it on a bad command line
DEMO_ROOT = Path(os.environ.get("OVS_DEMO_DIR", Path.home() / ".cache" / "ov-serverless" / "demo"))
_MODEL_FLAGS = ("batch_size", "shape", "layout", "target_device", "nireq", "plugin_config",
                "model_version_policy", "dynamic_batching", "max_sequence_number", "mean",
                "scale", "precision")
_BOOL_FLAGS = ("stateful", "idle_sequence_cleanup", "low_latency_transformation")
# a text model's task and options (core.openai), as OVMS's --task embeddings|rerank flags
_TASK_FLAGS = ("task", "pooling")
_TASK_INT_FLAGS = ("max_allowed_chunks", "max_allowed_inputs")
_TASK_BOOL_FLAGS = ("normalize", "truncate")
_INT_FLAGS = ("nireq", "max_sequence_number")
_BOOL_WORDS = ("true", "false", "1", "0", "yes", "no")
BOOL: dict[str, Any] = {"metavar": "true|false", "nargs": "?", "const": "true"}  # alone: true


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(_explicit_bools(sys.argv[1:] if argv is None else argv))
    try:
        args.log_level = _log_level(args.log_level)
        logs.configure(args.log_level, args.log_path)
    except OSError as exc:
        print(f"ov-serverless: cannot open log_path {args.log_path}: {exc.strerror or exc}",
              file=sys.stderr)
        return EX_USAGE
    if args.command == "package":
        from handlers.package import main as package

        return package(args)
    if args.command == "demo-repo":
        from demo.models import write_demo_repository

        print(write_demo_repository(Path(args.path)))
        return 0
    try:
        settings = _settings(args)
        if args.command == "invoke":
            return _invoke(settings, args)
        if args.command == "export-blobs":
            return _export_blobs(settings, args)
        return _serve(settings, args)
    except ConfigError as exc:  # a usage mistake: the message, as OVMS prints it, no traceback
        print(f"ov-serverless: {exc}", file=sys.stderr)
        return EX_USAGE


def _log_level(flag: str | None) -> str:
    """--log_level, else OVS_LOG_LEVEL (an unknown value: INFO, with a warning), else INFO."""
    if flag:
        return flag
    env = os.environ.get("OVS_LOG_LEVEL", "").strip().upper()
    if env and env not in logs.LEVELS:
        print(f"ov-serverless: OVS_LOG_LEVEL {env!r} is not one of {', '.join(logs.LEVELS)}: "
              "INFO", file=sys.stderr)
    return env if env in logs.LEVELS else "INFO"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ov-serverless", description=__doc__)
    parser.add_argument("--version", action=_Version, help="print the versions and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve REST (and gRPC with --port) until SIGTERM")
    _model_flags(serve)
    serve.add_argument("--port", type=int, default=0, help="gRPC port (0 = no gRPC)")
    serve.add_argument("--rest_port", type=int, default=8000, help="REST port (0 = no REST)")
    serve.add_argument("--grpc_bind_address", default="0.0.0.0")
    serve.add_argument("--rest_bind_address", default="127.0.0.1")
    serve.add_argument("--grpc_workers", type=int, default=0, help="gRPC threads (0 = auto)")
    serve.add_argument("--grpc_max_threads", type=_positive, help="at most this many gRPC "
                       "threads: calls beyond them wait (OVMS's cap)")
    serve.add_argument("--rest_workers", type=int, default=0, help="REST threads (0 = auto)")
    serve.add_argument("--grpc_max_message_bytes", type=int, default=1 << 30)
    serve.add_argument("--grpc_channel_arguments", type=_channel_arguments, default=[],
                       help="gRPC server arguments, comma-separated "
                            "(e.g. grpc.max_connection_age_ms=2000)")
    serve.add_argument("--metrics_port", type=int, default=0,
                       help="Prometheus /metrics port for gRPC-only mode (--rest_port 0)")
    serve.add_argument("--shutdown_grace_seconds", type=float, default=30.0)
    serve.add_argument("--rest_read_timeout_seconds", type=float, default=30.0,
                       help="close a REST client that sends nothing for this long "
                            "mid-request (0 = never)")
    _metrics_flags(serve)
    _cors_flags(serve)
    invoke = sub.add_parser("invoke", help="run one request through the router in-process")
    _model_flags(invoke)
    _metrics_flags(invoke)
    _cors_flags(invoke)
    invoke.add_argument("method")
    invoke.add_argument("path")
    invoke.add_argument("--data", default="", help="request body, or @file")
    invoke.add_argument("--header", action="append", default=[], help="'Name: value'")
    export = sub.add_parser("export-blobs", help="load every model and write its compiled "
                            "blob to OUT, for OVS_COMPILED_CACHE or the bucket")
    _model_flags(export)
    export.add_argument("out")
    export.add_argument("--per_version", action="store_true",
                        help="write OUT/<model>/<version>/.ov-compiled/<key>.blob, to copy "
                             "beside each version, instead of OUT/<key>.blob "
                             "(OVS_COMPILED_CACHE)")
    export.add_argument("--concurrent", action="store_true",
                        help="blobs for a concurrent host (serve, Cloud Run with "
                             "OVS_CONCURRENT=1); default: OVS_CONCURRENT, 0 for Lambda")
    demo = sub.add_parser("demo-repo", help="write the demo model repository to PATH")
    demo.add_argument("path")
    package = sub.add_parser("package", help="build a deployment package: lambda-zip OUT.zip")
    _package_flags(package)
    for child in (serve, invoke, export, demo, package):
        child.add_argument("--log_level", default=None, choices=logs.LEVELS, type=str.upper,
                           help="default: OVS_LOG_LEVEL, else INFO")
        child.add_argument("--log_path", default="", help="also write the log to this file")
    serve.add_argument("--version", action=_Version, help="print the versions and exit")
    return parser


class _Version(argparse.Action):
    """OVMS's --version: this server's version, then its OpenVINO's (imported only here)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from importlib.metadata import version

        import openvino

        print(f"ov-serverless {version('ov-serverless')}\n"
              f"OpenVINO backend {openvino.get_version()}")
        parser.exit()


def _package_flags(parser: argparse.ArgumentParser) -> None:
    from handlers.package import add_arguments

    add_arguments(parser)


def _model_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config_path")
    parser.add_argument("--model_name")
    parser.add_argument("--model_path")
    parser.add_argument("--cache_dir")
    parser.add_argument("--cpu_extension",
                        help="a library of custom operations for the models (OpenVINO extension)")
    parser.add_argument("--lazy_load", action="store_true", help="compile on first request")
    parser.add_argument("--file_system_poll_wait_seconds", type=float)
    parser.add_argument("--sequence_cleaner_poll_wait_minutes",
                        help="stateful models: drop a sequence idle this long (0: never)")
    parser.add_argument("--max_request_bytes")
    for flag in (*_MODEL_FLAGS, *_TASK_FLAGS, *_TASK_INT_FLAGS):
        parser.add_argument(f"--{flag}")
    for flag in (*_BOOL_FLAGS, *_TASK_BOOL_FLAGS):  # `--stateful`, `--stateful false`, `=false`
        parser.add_argument(f"--{flag}", **BOOL)


def _metrics_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metrics_enable", **BOOL,
                        help="serve /metrics (on unless false, or a config file's "
                             "monitoring says otherwise)")
    parser.add_argument("--metrics_list", default="",
                        help="comma-separated metric families: only these are served")


def _cors_flags(parser: argparse.ArgumentParser) -> None:
    for what in ("origins", "methods", "headers"):
        parser.add_argument(f"--allowed_{what}", help=f"comma-separated {what} allowed to "
                            "call the REST API from a browser (CORS; default *, '' for none)")
    parser.add_argument("--allow_credentials", **BOOL,
                        help="allow credentialed cross-origin requests (CORS)")


def _explicit_bools(argv: list[str]) -> list[str]:
    """A bool flag takes the next word as its value only when that word is a bool (`--stateful
    false`): `--stateful GET /v1/...` is the flag and two positionals, which argparse alone
    would read as `--stateful=GET`. So each bool flag is rewritten as `--flag=value`."""
    bare = {f"--{flag}" for flag in (*_BOOL_FLAGS, *_TASK_BOOL_FLAGS, "metrics_enable",
                                      "allow_credentials")}
    out: list[str] = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        index += 1
        if arg not in bare:
            out.append(arg)
        elif index < len(argv) and argv[index].lower() in _BOOL_WORDS:
            out.append(f"{arg}={argv[index]}")
            index += 1
        else:
            out.append(f"{arg}=true")
    return out


def _channel_arguments(text: str) -> list[tuple[str, int | str]]:
    """OVMS's --grpc_channel_arguments: `name=value,...`; integer values as integers."""
    pairs: list[tuple[str, int | str]] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise argparse.ArgumentTypeError(f"expected name=value, got {item!r}")
        value = value.strip()
        pairs.append((name.strip(), int(value) if value.lstrip("-").isdigit() else value))
    return pairs


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def _settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    for key in ("config_path", "model_name", "model_path", "cache_dir", "cpu_extension"):
        if getattr(args, key) is not None:
            overrides[key] = getattr(args, key)
    if args.max_request_bytes is not None:
        overrides["max_request_bytes"] = option_int(args.max_request_bytes,
                                                    "--max_request_bytes")
    if args.lazy_load:
        overrides["lazy_load"] = True
    if args.sequence_cleaner_poll_wait_minutes is not None:
        overrides["sequence_cleaner_minutes"] = minutes_setting(
            args.sequence_cleaner_poll_wait_minutes, "--sequence_cleaner_poll_wait_minutes")
    if args.file_system_poll_wait_seconds is not None:
        overrides["reload_interval"] = args.file_system_poll_wait_seconds
    elif args.command == "serve" and "OVS_RELOAD_INTERVAL" not in os.environ:
        overrides["reload_interval"] = 1.0  # OVMS's default poll for long-running servers
    if args.command == "serve" and "OVS_CONCURRENT" not in os.environ:
        overrides["concurrent"] = True  # threads and gRPC: adaptive LATENCY/THROUGHPUT
    if args.command == "export-blobs":  # compile now; write only to OUT
        overrides.update(lazy_load=False, export_blobs=False)
        if args.concurrent:
            overrides["concurrent"] = True
    options = {flag: getattr(args, flag) for flag in _MODEL_FLAGS if getattr(args, flag)}
    bools = (*_BOOL_FLAGS, *_TASK_BOOL_FLAGS)
    options.update({flag: option_bool(getattr(args, flag), f"--{flag}")
                    for flag in bools if getattr(args, flag) is not None})
    options.update({flag: getattr(args, flag) for flag in _TASK_FLAGS
                    if getattr(args, flag) is not None})
    options.update({flag: option_int(getattr(args, flag), f"--{flag}")
                    for flag in _TASK_INT_FLAGS if getattr(args, flag) is not None})
    if options.keys() & {"max_sequence_number", "idle_sequence_cleanup",
                         "low_latency_transformation"} and not options.get("stateful"):
        raise ConfigError("Setting low_latency_transformation, max_sequence_number and "
                          "idle_sequence_cleanup require setting stateful flag for the model.")
    if options:
        overrides["model_options"] = _decode_json_flags(options)
    if args.command in ("serve", "invoke") and (args.metrics_enable is not None
                                                or args.metrics_list):
        overrides["metrics"] = metrics_from_flags(
            _bool_arg(args.metrics_enable, "--metrics_enable"), args.metrics_list)
    if args.command in ("serve", "invoke"):
        overrides["cors"] = cors_from_env(
            os.environ, args.allowed_origins, args.allowed_methods, args.allowed_headers,
            _bool_arg(args.allow_credentials, "--allow_credentials"))
    overrides["log_level"] = args.log_level
    settings = Settings.from_env(**overrides)
    if not (settings.config_path or settings.model_path or settings.model_name):
        settings = _demo_settings(settings)
    return settings


def _bool_arg(value: str | None, flag: str) -> bool | None:
    return None if value is None else option_bool(value, flag)


def _decode_json_flags(options: dict[str, Any]) -> dict[str, Any]:
    """JSON and integer flags, checked as their OVS_* variables are (same code, same text)."""
    for key in ("plugin_config", "model_version_policy", "dynamic_batching"):
        if key in options:
            options[key] = option_json(options[key], f"--{key}")
    for key in _INT_FLAGS:
        if key in options:
            options[key] = option_int(options[key], f"--{key}")
    return options


def _demo_settings(settings: Settings) -> Settings:
    from dataclasses import replace

    from demo.models import write_demo_repository

    config = DEMO_ROOT / "config.json"
    if not config.is_file():
        write_demo_repository(DEMO_ROOT)
    print(f"No model configured: serving the demo model repository at {DEMO_ROOT}",
          file=sys.stderr)
    return replace(settings, config_path=str(config))


def _invoke(settings: Settings, args: argparse.Namespace) -> int:
    from core.api import App, make_request
    from core.serving.registry import ModelManager

    body = args.data.encode()
    if args.data.startswith("@"):
        body = Path(args.data[1:]).read_bytes()
    headers = dict(h.split(":", 1) for h in args.header)
    app = App(ModelManager.start(settings), settings)
    response = app.handle(make_request(args.method, args.path, body,
                                       {k.strip(): v.strip() for k, v in headers.items()}))
    sys.stdout.buffer.write(response.body + b"\n")
    return 0 if response.status < 400 else 1


def _export_blobs(settings: Settings, args: argparse.Namespace) -> int:
    """Print each blob written (and, per version, where it goes); exit 1 when a version did
    not load, so a build step that bakes blobs fails instead of shipping without one."""
    from core.runtime.compiled_cache import export_manager
    from core.serving.registry import ModelManager

    manager = ModelManager.start(settings)
    out = Path(args.out)
    try:
        blobs = export_manager(manager, out, per_version=args.per_version)
    except OSError as exc:
        print(f"ov-serverless: cannot write the blobs to {out}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    for blob in blobs:
        if args.per_version:
            model, *rest = blob.relative_to(out).parts
            base = manager.models[model].config.base_path.rstrip("/")
            print(f"{blob} -> {base}/{'/'.join(rest)}")
        else:
            print(blob)
    return _report_unexported(manager)


def _report_unexported(manager: Any) -> int:
    code = 0
    for served in manager.models.values():
        if served.error or not served.versions:
            why = served.error or "no version to load"
            print(f"ov-serverless: model {served.name}: {why}", file=sys.stderr)
            code = 1
        for number, version in sorted(served.versions.items()):
            if not version.available:
                print(f"ov-serverless: model {served.name} version {number} did not load: "
                      f"{version.status.error_message}", file=sys.stderr)
                code = 1
            elif not served.config.allow_cache:
                print(f"ov-serverless: model {served.name} version {number}: no blob "
                      "(allow_cache is false)", file=sys.stderr)
    return code


def _serve(settings: Settings, args: argparse.Namespace) -> int:
    from handlers.server import serve

    return serve(settings, args)


if __name__ == "__main__":
    sys.exit(main())
