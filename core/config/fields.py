"""JSON-path validators shared by the config parsers: each checks one value and raises a
ConfigError naming the value's path (`model_config_list[0].config.nireq: ...`)."""

from __future__ import annotations

import os
import posixpath
from pathlib import Path
from typing import Any

from core.errors import ConfigError


def require_object(value: Any, path: str) -> None:
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(value).__name__}")


def reject_unknown(value: dict[str, Any], allowed: set[str], path: str) -> None:
    unknown = sorted(set(value) - allowed)
    if unknown:
        where = unknown[0] if path == "$" else f"{path}.{unknown[0]}"
        raise ConfigError(f"{where}: unknown field (JSON schema parse error)")


def integer(value: Any, path: str, minimum: int | None = None) -> int:
    """An integer, or a string of one (as OVMS reads them); at least `minimum`."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{path}: expected an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{path}: must be >= {minimum}, got {value}")
    return value


def boolean(value: Any, path: str) -> bool:
    """true or false, as JSON or as the strings "true" / "false" (any case)."""
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise ConfigError(f"{path}: expected true or false, got {value!r}")
    return value


def text(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{path}: expected a non-empty string, got {value!r}")
    return value


def choice(value: Any, options: tuple[str, ...], path: str) -> str:
    if value not in options:
        raise ConfigError(f"{path}: expected one of {', '.join(options)}, got {value!r}")
    return str(value)


# The pipeline parsers' forms: a required list, an object of known keys, a required name


def required_list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: required, a list")
    return value


def object_of(value: Any, allowed: set[str], where: str) -> None:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a JSON object")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown field (JSON schema parse error)")


def required_text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: required, a non-empty string")
    return value


# Paths in a config file


def dirname(source: str) -> str:
    """The folder of a config file, local or a bucket URL ("" for none)."""
    if "://" in source:
        return source.rsplit("/", 1)[0] if "/" in source.split("://", 1)[1] else source
    return str(Path(source).parent) if source else ""


def resolve(base_dir: str, base_path: str) -> str:
    """OVMS resolves a relative base_path against the config file's folder."""
    if "://" in base_path or os.path.isabs(base_path) or not base_dir:
        return base_path
    if "://" in base_dir:
        return posixpath.normpath(f"{base_dir}/{base_path}").replace(":/", "://", 1)
    return os.path.normpath(os.path.join(base_dir, base_path))
