"""Every setting, declared once: its flag, env variable, config.json field, type, default and
one-line doc. The CLI's options, Settings.from_env and the README's settings table are made
from this table (handlers/cli.py, core.config.settings, core.config.docs)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.config.options import (
    BOOL,
    CHANNEL_ARGUMENTS,
    COUNT,
    FOLDERS,
    INT,
    JSON,
    MINUTES,
    PORT,
    POSITIVE,
    PREFIX,
    SECONDS,
    TEXT,
    Kind,
)
from core.tensors.limits import Limits

# The subcommands offering a flag
MODEL = ("serve", "invoke", "export-blobs")  # which models, and how to load them
HTTP = ("serve", "invoke")  # what the REST API answers (metrics, CORS)
SERVE = ("serve",)  # the long-running server
EVERY = ("serve", "invoke", "export-blobs", "demo-repo", "package")
# Where a value goes
SETTINGS = "settings"  # a Settings field (or a part of one: metrics, cors, limits)
MODEL_OPTION = "model"  # a single-model knob: Settings.model_options, checked as config.json
SERVER = "server"  # read by `serve` only (handlers.server)
DOCUMENTED = "documented"  # read where it is used; listed here for the README
_LIMITS = Limits()


@dataclass(frozen=True)
class Setting:
    name: str  # the value's name: a Settings field, a model option or a server option
    kind: Kind
    doc: str
    flag: str = ""  # "--name", or "" for none
    env: str = ""  # "OVS_NAME", or "" for none
    field: str = ""  # its config.json field, when it has one
    default: Any = None  # used when neither the flag nor the variable is given
    shown: str = ""  # the default as the README states it, when `default` does not say it
    commands: tuple[str, ...] = ()  # the subcommands offering the flag
    target: str = SETTINGS
    empty: bool = False  # an empty value is a value ("" = none); otherwise it is not given
    choices: tuple[str, ...] = ()  # the flag's choices, when argparse checks them

    def read(self, flags: Mapping[str, str], env: Mapping[str, str]) -> tuple[bool, Any]:
        """(given, value): the flag's text (`flags` by name) if given, else the variable's,
        parsed by the setting's type; (False, default) when neither is given."""
        for text, name in (
            (flags.get(self.name), self.flag),
            (env.get(self.env) if self.env else None, self.env),
        ):
            if text is not None and (text or self.empty):
                return True, self.kind.parse(text, name)
        return False, self.default


def _model(name: str, kind: Kind, doc: str, shown: str = "") -> Setting:
    return Setting(
        name,
        kind,
        doc,
        flag=f"--{name}",
        env=f"OVS_{name.upper()}",
        field=name,
        shown=shown,
        commands=MODEL,
        target=MODEL_OPTION,
    )


def _serve(name: str, kind: Kind, doc: str, default: Any) -> Setting:
    return Setting(
        name, kind, doc, flag=f"--{name}", default=default, commands=SERVE, target=SERVER
    )


def _cors(what: str) -> Setting:
    return Setting(
        f"allowed_{what}",
        TEXT,
        f"CORS: comma-separated {what} allowed to call the REST API from a browser ('' for none)",
        flag=f"--allowed_{what}",
        env=f"OVS_ALLOWED_{what.upper()}",
        default="*",
        commands=HTTP,
        empty=True,
    )


def _storage_client(cloud: str, env: str, extra: str = "") -> Setting:
    return Setting(
        env.lower(),
        TEXT,
        f"which client reads {cloud}: `auto` takes the small REST "
        "client where the environment allows it (skipping the SDK's import on a cold "
        "start), else the SDK; `sdk` or `rest` forces one (`rest` fails the model with "
        "the reason when the set-up needs the SDK)" + extra,
        env=env,
        default="auto",
        target=DOCUMENTED,
    )


TABLE: tuple[Setting, ...] = (
    # which models
    Setting(
        "config_path",
        TEXT,
        "OVMS config.json, a local path or a bucket URL",
        flag="--config_path",
        env="OVS_CONFIG_PATH",
        commands=MODEL,
    ),
    Setting(
        "model_name",
        TEXT,
        "single-model form: the model's name (default: its folder's)",
        flag="--model_name",
        env="OVS_MODEL_NAME",
        commands=MODEL,
    ),
    Setting(
        "model_path",
        TEXT,
        "single-model form: the model's base path or bucket URL",
        flag="--model_path",
        env="OVS_MODEL_PATH",
        commands=MODEL,
    ),
    # single-model knobs: refused next to a config file, as OVMS refuses them
    _model("batch_size", TEXT, "an integer, `-1`, `lo:hi` or `auto`"),
    _model("shape", TEXT, "`(1,3,224,224)`, ranges `1:8`, `-1`, `auto`, or a per-input map"),
    _model("layout", TEXT, "`NHWC:NCHW` = request:model (a transpose in the compiled model)"),
    _model("nireq", INT, "infer requests in the pool (`0`: as the host suits)", shown="`0`"),
    _model(
        "target_device",
        TEXT,
        "what OpenVINO takes: `CPU`, `GPU`, `AUTO:GPU,CPU`, ...",
        shown="`CPU`",
    ),
    _model("plugin_config", JSON, "OpenVINO properties (OpenVINO 1.0 keys renamed as OVMS does)"),
    _model(
        "model_version_policy",
        JSON,
        '`{"all": {}}`, `{"latest": {"num_versions": N}}` or `{"specific": {"versions": [...]}}`',
        shown="latest 1",
    ),
    _model(
        "dynamic_batching",
        JSON,
        'ours: `{"max_batch_size": 8, "window_us": 2000}` stacks '
        "concurrent requests into one inference",
        shown="off",
    ),
    _model("stateful", BOOL, "a stateful model (sequences of requests)", shown="`false`"),
    _model("max_sequence_number", INT, "stateful: sequences kept at once", shown="`500`"),
    _model("idle_sequence_cleanup", BOOL, "stateful: drop idle sequences", shown="`true`"),
    _model(
        "low_latency_transformation",
        BOOL,
        "stateful: OpenVINO's low-latency transformation",
        shown="`false`",
    ),
    _model("mean", TEXT, "`(x - mean) / scale` in the compiled model: a number or one per channel"),
    _model("scale", TEXT, "see `mean`"),
    _model("precision", TEXT, "`UINT8:FP32` = request:model element type"),
    _model("task", TEXT, "an OpenAI-API text model: `embeddings` or `rerank`"),
    _model("pooling", TEXT, "embeddings: `CLS`, `LAST` or `MEAN` (overrides the graph's)"),
    _model("normalize", BOOL, "embeddings: normalise the vectors (overrides the graph's)"),
    _model("truncate", BOOL, "cut inputs longer than the context instead of a 400"),
    _model("max_allowed_chunks", INT, "rerank: most documents or chunks", shown="`10000`"),
    _model("max_allowed_inputs", INT, "embeddings: most inputs in a request", shown="`500`"),
    # how models load
    Setting(
        "cache_dir",
        TEXT,
        "OpenVINO compiled-blob cache and downloaded models",
        flag="--cache_dir",
        env="OVS_CACHE_DIR",
        default="/tmp/ov-cache",
        commands=MODEL,
    ),
    Setting(
        "cpu_extension",
        TEXT,
        "a library of custom operations (an OpenVINO extension), loaded before the models",
        flag="--cpu_extension",
        env="OVS_CPU_EXTENSION",
        default="",
        commands=MODEL,
    ),
    Setting(
        "lazy_load",
        BOOL,
        "compile on first request instead of at start",
        flag="--lazy_load",
        env="OVS_LAZY_LOAD",
        default=False,
        commands=MODEL,
    ),
    Setting(
        "reload_interval",
        SECONDS,
        "seconds between repository/config checks (on the "
        "request path on serverless hosts; `0`: off)",
        flag="--file_system_poll_wait_seconds",
        env="OVS_RELOAD_INTERVAL",
        default=0.0,
        shown="`0`; `serve`: `1`",
        commands=MODEL,
    ),
    Setting(
        "sequence_cleaner_minutes",
        MINUTES,
        "stateful models: a sequence idle this long is dropped (`0`: never)",
        flag="--sequence_cleaner_poll_wait_minutes",
        env="OVS_SEQUENCE_CLEANER_POLL_WAIT_MINUTES",
        default=5.0,
        shown="`5`",
        commands=MODEL,
    ),
    Setting(
        "concurrent",
        BOOL,
        "many requests at once: adaptive execution for models whose "
        "plugin_config sets no PERFORMANCE_HINT / NUM_STREAMS (a model whose inputs take one "
        "row: one LATENCY compile taking 1-4 rows, a request alone runs at once and requests "
        "that arrive during an inference run next as one batch; other models: a LATENCY "
        "compile for a request alone in flight, a THROUGHPUT one made in the background for "
        "requests among others; `ov_serverless_variant_requests` counts each), compiled "
        "blobs for such hosts",
        flag="--concurrent",
        env="OVS_CONCURRENT",
        default=False,
        shown="`false`; `serve`: `true`",
        commands=("export-blobs",),
    ),
    Setting(
        "gather",
        BOOL,
        "on a concurrent host, compile an untuned model whose inputs take one row once and "
        "gather the requests that arrive during an inference into the next one (false: two "
        "compiles, LATENCY and THROUGHPUT: a few percent more throughput for a crowd, for a "
        "second copy of the weights in memory; bench/RESULTS.md)",
        flag="--gather",
        env="OVS_GATHER",
        default=True,
        commands=MODEL,
    ),
    Setting(
        "compiled_cache",
        FOLDERS,
        "read-only folders of exported compiled blobs (a baked image)",
        env="OVS_COMPILED_CACHE",
        default=(),
    ),
    Setting(
        "export_blobs",
        BOOL,
        "write each compiled model's blob to `<cache_dir>/blobs` for the next start on this disk",
        env="OVS_EXPORT_BLOBS",
        shown="`true` when concurrent, but `false` on Cloud Run (its filesystem is memory)",
    ),
    # requests
    Setting(
        "max_request_bytes",
        INT,
        "request body limit",
        flag="--max_request_bytes",
        env="OVS_MAX_REQUEST_BYTES",
        shown="64 MiB; just under 6 MB on Lambda",
        commands=MODEL,
    ),
    Setting(
        "base_path", PREFIX, "URL prefix stripped before routing", env="OVS_BASE_PATH", default=""
    ),
    Setting(
        "max_tensor_elements",
        INT,
        "limit checked before allocation",
        env="OVS_MAX_TENSOR_ELEMENTS",
        default=_LIMITS.max_tensor_elements,
        shown="64 M",
    ),
    Setting(
        "max_tensor_bytes",
        INT,
        "limit checked before allocation",
        env="OVS_MAX_TENSOR_BYTES",
        default=_LIMITS.max_tensor_bytes,
        shown="1 GiB",
    ),
    Setting(
        "max_image_pixels",
        INT,
        "limit checked before allocation",
        env="OVS_MAX_IMAGE_PIXELS",
        default=_LIMITS.max_image_pixels,
        shown="64 M",
    ),
    Setting(
        "metrics_enable",
        BOOL,
        "serve `/metrics` (a config file's `monitoring` block wins)",
        flag="--metrics_enable",
        env="OVS_METRICS_ENABLE",
        field="monitoring.metrics.enable",
        shown="`true`",
        commands=HTTP,
    ),
    Setting(
        "metrics_list",
        TEXT,
        "comma-separated metric families: only these are served (needs metrics_enable)",
        flag="--metrics_list",
        env="OVS_METRICS_LIST",
        field="monitoring.metrics.metrics_list",
        default="",
        shown="every family",
        commands=HTTP,
    ),
    _cors("origins"),
    _cors("methods"),
    _cors("headers"),
    Setting(
        "allow_credentials",
        BOOL,
        "CORS: allow credentialed cross-origin requests",
        flag="--allow_credentials",
        env="OVS_ALLOW_CREDENTIALS",
        default=False,
        commands=HTTP,
    ),
    # logs
    Setting(
        "log_level",
        TEXT,
        "`TRACE` (logged as `DEBUG`), `DEBUG`, `INFO`, `WARNING` or `ERROR`",
        flag="--log_level",
        env="OVS_LOG_LEVEL",
        default="INFO",
        commands=EVERY,
        choices=("TRACE", "DEBUG", "INFO", "WARNING", "ERROR"),
    ),
    Setting(
        "log_path",
        TEXT,
        "also write the log to this file",
        flag="--log_path",
        default="",
        commands=EVERY,
        target=SERVER,
    ),
    # the server (`serve`)
    _serve("port", PORT, "gRPC port (`0`: no gRPC)", 0),
    _serve("rest_port", PORT, "REST port (`0`: no REST)", 8000),
    _serve("grpc_bind_address", TEXT, "gRPC listen address", "0.0.0.0"),
    _serve("rest_bind_address", TEXT, "REST listen address", "127.0.0.1"),
    _serve("grpc_workers", COUNT, "gRPC threads (`0`: auto)", 0),
    _serve(
        "grpc_max_threads",
        POSITIVE,
        "at most this many gRPC threads: calls beyond them wait (OVMS's cap)",
        None,
    ),
    _serve("rest_workers", COUNT, "REST threads (`0`: auto)", 0),
    Setting(
        "grpc_max_message_bytes",
        INT,
        "largest gRPC message",
        flag="--grpc_max_message_bytes",
        default=1 << 30,
        shown="1 GiB",
        commands=SERVE,
        target=SERVER,
    ),
    _serve(
        "grpc_channel_arguments",
        CHANNEL_ARGUMENTS,
        "gRPC server arguments, e.g. `grpc.max_connection_age_ms=2000`",
        [],
    ),
    _serve(
        "metrics_port", PORT, "Prometheus `/metrics` port for gRPC-only mode (`--rest_port 0`)", 0
    ),
    _serve(
        "shutdown_grace_seconds",
        SECONDS,
        "after SIGTERM, in-flight requests finish within this",
        30.0,
    ),
    _serve(
        "rest_read_timeout_seconds",
        SECONDS,
        "a REST request's whole head must arrive within this long, from the connection's "
        "accept (from its first byte on a kept-alive connection), and its body may pause this "
        "long between reads, else 408 and close (nginx's `client_header_timeout` and "
        "`client_body_timeout`); a new connection that sends nothing is closed after it (75 s at "
        "most; `0`: never)",
        30.0,
    ),
    # read where they are used
    _storage_client("S3", "OVS_S3_CLIENT", "; `boto3` means `sdk`"),
    _storage_client("Cloud Storage", "OVS_GCS_CLIENT"),
    _storage_client("Azure Blob", "OVS_AZURE_CLIENT"),
    Setting(
        "azure_auth_level",
        TEXT,
        "Azure Functions: the route's auth level, `ANONYMOUS`, `FUNCTION` or `ADMIN`",
        env="OVS_AZURE_AUTH_LEVEL",
        default="ANONYMOUS",
        target=DOCUMENTED,
    ),
    Setting(
        "import_ovc",
        TEXT,
        "`1`: import openvino with its model-conversion tool "
        "(`ov.convert_model`); skipped by default, it costs ~70 ms of a cold start",
        env="OVS_IMPORT_OVC",
        default="0",
        target=DOCUMENTED,
    ),
    Setting(
        "demo_dir",
        TEXT,
        "where `serve` with no model writes the demo repository",
        env="OVS_DEMO_DIR",
        shown="`~/.cache/ov-serverless/demo`",
        target=DOCUMENTED,
    ),
)
SETTINGS_BY_NAME = {setting.name: setting for setting in TABLE}


def flagged(command: str) -> tuple[Setting, ...]:
    """The settings `command` takes as flags."""
    return tuple(setting for setting in TABLE if setting.flag and command in setting.commands)
