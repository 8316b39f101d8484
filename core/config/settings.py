"""Process-wide settings: where the models are and how this process serves them, read from flags
and OVS_* env variables through the one settings table (core.config.table)."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from core.config.config_file import load_config_file
from core.config.model_entry import parse_model_config
from core.config.monitoring import metrics_from_flags
from core.config.objects import MetricsConfig, ServerConfig
from core.config.table import MODEL_OPTION, SETTINGS, SETTINGS_BY_NAME, TABLE
from core.cors import CorsConfig
from core.errors import ConfigError
from core.tensors.limits import Limits

LAMBDA_PAYLOAD_LIMIT = 6 * 1024 * 1024 - 64 * 1024  # leave room for the event envelope
DEFAULT_MAX_REQUEST_BYTES = 64 * 1024 * 1024
DEFAULT_CACHE_DIR = "/tmp/ov-cache"
_STATEFUL_ONLY = {"max_sequence_number", "idle_sequence_cleanup", "low_latency_transformation"}


@dataclass(frozen=True)
class Settings:
    """Process-wide settings: where the models are and how this process serves them."""

    config_path: str | None = None
    model_name: str | None = None
    model_path: str | None = None
    model_options: Mapping[str, Any] = field(default_factory=dict)  # single-model knobs
    cache_dir: str = DEFAULT_CACHE_DIR
    lazy_load: bool = False
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    base_path: str = ""  # URL prefix stripped before routing (API Gateway stage, mapping)
    reload_interval: float = 0.0
    log_level: str = "INFO"
    limits: Limits = Limits()
    # Many requests at once (`ov-serverless serve`: REST threads + gRPC; Cloud Run with
    # OVS_CONCURRENT=1) or one at a time (Lambda, Azure, functions-framework by default):
    # picks the compile defaults (THROUGHPUT streams vs LATENCY) and whether compiled blobs
    # are written back. `serve` sets it; OVS_CONCURRENT=0/1 overrides.
    concurrent: bool = False
    # a concurrent host gathers a one-row model's requests on one compile (OVS_GATHER=0: two
    # compiles, LATENCY and THROUGHPUT; core.runtime.adaptive)
    gather: bool = True
    compiled_cache: tuple[str, ...] = ()  # read-only compiled-blob folders (OVS_COMPILED_CACHE)
    # Write compiled blobs to <cache_dir>/blobs (OVS_EXPORT_BLOBS=0/1); None: when concurrent,
    # except on Cloud Run (K_SERVICE), whose filesystem is memory: a blob there costs the
    # instance its size in RAM and is gone with it.
    export_blobs: bool | None = None
    metrics: MetricsConfig = MetricsConfig()  # flags/env; a config file's monitoring wins
    cors: CorsConfig = CorsConfig()  # OVMS's --allowed_origins & co.; OVS_ALLOWED_* env
    cpu_extension: str = ""  # a library of custom operations (OVS_CPU_EXTENSION)
    # stateful models: a sequence idle this long is dropped (OVMS's
    # --sequence_cleaner_poll_wait_minutes; 0: never)
    sequence_cleaner_minutes: float = 5.0

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        flags: Mapping[str, str] | None = None,
        defaults: Mapping[str, Any] | None = None,
        **overrides: Any,
    ) -> Settings:
        """Each setting from its flag (`flags`: the text given, by setting name), else its env
        variable, else `defaults` (a command's own, e.g. `serve` polls), else the table's;
        `overrides` replace the result's fields."""
        env = os.environ if env is None else env
        values = dict(defaults or {})
        options: dict[str, Any] = {}
        for setting in TABLE:
            if setting.target not in (SETTINGS, MODEL_OPTION):
                continue
            given, value = setting.read(flags or {}, env)
            if setting.target == MODEL_OPTION and given:
                options[setting.name] = value
            elif setting.target == SETTINGS and (given or setting.name not in values):
                values[setting.name] = value
        if options.keys() & _STATEFUL_ONLY and not options.get("stateful"):  # OVMS's text
            raise ConfigError(
                "Setting low_latency_transformation, max_sequence_number and "
                "idle_sequence_cleanup require setting stateful flag for the model."
            )
        settings = cls(
            config_path=values["config_path"] or None,
            model_name=values["model_name"] or None,
            model_path=values["model_path"] or None,
            model_options=options,
            cache_dir=values["cache_dir"],
            lazy_load=values["lazy_load"],
            max_request_bytes=_max_request_bytes(values["max_request_bytes"], env),
            base_path=values["base_path"],
            reload_interval=values["reload_interval"],
            log_level=values["log_level"].upper(),
            concurrent=values["concurrent"],
            gather=values["gather"],
            compiled_cache=values["compiled_cache"],
            export_blobs=_export_blobs(values["export_blobs"], env),
            metrics=metrics_from_flags(values["metrics_enable"], values["metrics_list"]),
            cors=_cors(values),
            cpu_extension=values["cpu_extension"],
            sequence_cleaner_minutes=values["sequence_cleaner_minutes"],
            limits=Limits(
                values["max_tensor_elements"],
                values["max_tensor_bytes"],
                values["max_image_pixels"],
            ),
        )
        return replace(settings, **overrides)

    def server_config(self) -> ServerConfig:
        """Read the config file, or build the single-model config from flags/env."""
        if self.config_path and (self.model_path or self.model_name):
            raise ConfigError("Use either config_path or model_path with model_name")
        if self.config_path and self.model_options:  # OVMS exits on these too
            raise ConfigError(
                "Model parameters in CLI are exclusive with the config file: "
                f"{', '.join(sorted(self.model_options))} (set them per model in the config)"
            )
        if self.config_path:
            return load_config_file(self.config_path, self.metrics)
        if self.model_path:
            entry = {
                "name": self.model_name or _default_name(self.model_path),
                "base_path": self.model_path,
                **self.model_options,
            }
            return ServerConfig((parse_model_config(entry, "model"),), metrics=self.metrics)
        if self.model_name:
            raise ConfigError("model_path is required with model_name")
        raise ConfigError(
            "No models configured: set --config_path or --model_name/--model_path "
            "(env OVS_CONFIG_PATH or OVS_MODEL_NAME/OVS_MODEL_PATH)"
        )


def _default_name(path: str) -> str:
    """The model's folder name; a URL's query and fragment (a SAS, a signature) are no part
    of it."""
    if "://" in path:
        path = urlsplit(path).path
    return posixpath.basename(path.rstrip("/")) or "model"


def _max_request_bytes(given: int | None, env: Mapping[str, str]) -> int:
    if given is not None:
        return given
    return LAMBDA_PAYLOAD_LIMIT if "AWS_LAMBDA_FUNCTION_NAME" in env else DEFAULT_MAX_REQUEST_BYTES


def _export_blobs(given: bool | None, env: Mapping[str, str]) -> bool | None:
    if given is not None:
        return given
    return False if "K_SERVICE" in env else None


def cors_from_env(
    env: Mapping[str, str],
    origins: str | None = None,
    methods: str | None = None,
    headers: str | None = None,
    credentials: bool | None = None,
) -> CorsConfig:
    """OVS_ALLOWED_ORIGINS, OVS_ALLOWED_METHODS, OVS_ALLOWED_HEADERS and
    OVS_ALLOW_CREDENTIALS, each overridden by its argument when given."""
    given = {
        "allowed_origins": origins,
        "allowed_methods": methods,
        "allowed_headers": headers,
        "allow_credentials": None if credentials is None else str(credentials),
    }
    flags = {name: text for name, text in given.items() if text is not None}
    return _cors({name: SETTINGS_BY_NAME[name].read(flags, env)[1] for name in given})


def _cors(values: Mapping[str, Any]) -> CorsConfig:
    return CorsConfig.from_flags(
        values["allowed_origins"],
        values["allowed_methods"],
        values["allowed_headers"],
        values["allow_credentials"],
    )
