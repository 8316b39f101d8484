"""How a setting's text, given as a flag (`--nireq 2`) or an env variable (`OVS_NIREQ=2`), becomes
a value: one parser per type, the same code and message for both forms (`name` is the flag or the
variable, e.g. `--nireq: expected an integer, got 'two'`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from core.errors import ConfigError

_N = TypeVar("_N", int, float)


def option_text(text: str, name: str) -> str:
    return text


def option_bool(text: str, name: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes"):
        return True
    if value in ("0", "false", "no"):
        return False
    raise ConfigError(f"{name}: expected true or false, got {text!r}")


def option_int(text: str, name: str) -> int:
    return _number(text, name, int, "an integer")


def option_positive(text: str, name: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"{name}: expected a positive integer, got {text!r}")
    return int(text)


def option_count(text: str, name: str) -> int:
    """A non-negative integer (a thread count, `0`: auto)."""
    value = _number(text, name, int, "an integer")
    if value < 0:
        raise ConfigError(f"{name}: expected an integer >= 0, got {text!r}")
    return value


def option_port(text: str, name: str) -> int:
    """A TCP port, `0` included (OVMS exits on one out of range)."""
    value = _number(text, name, int, "an integer")
    if not 0 <= value <= 65535:
        raise ConfigError(f"{name}: expected a port number (0-65535), got {text!r}")
    return value


def option_float(text: str, name: str) -> float:
    return _number(text, name, float, "a number")


def option_seconds(text: str, name: str) -> float:
    """A non-negative number of seconds (`0`: off or never, as the setting says)."""
    value = _number(text, name, float, "a number")
    if not value >= 0:  # NaN too
        raise ConfigError(f"{name}: expected a number >= 0, got {text!r}")
    return value


def _number(text: str, name: str, kind: Callable[[str], _N], what: str) -> _N:
    try:
        return kind(text)
    except ValueError:
        raise ConfigError(f"{name}: expected {what}, got {text!r}") from None


def option_json(text: str, name: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{name}: not valid JSON: {exc}") from None


def minutes_setting(value: str, name: str) -> float:
    """A non-negative number of minutes (fractions allowed)."""
    try:
        minutes = float(value)
    except ValueError:
        raise ConfigError(f"{name}: expected a number of minutes, got {value!r}") from None
    if not minutes >= 0:
        raise ConfigError(f"{name}: must be >= 0, got {value}")
    return minutes


def option_folders(text: str, name: str) -> tuple[str, ...]:
    """`:`-separated folders, empty parts skipped."""
    return tuple(part for part in text.split(":") if part)


def option_prefix(text: str, name: str) -> str:
    """A URL prefix, without its trailing slash."""
    return text.rstrip("/")


def channel_arguments(text: str, name: str) -> list[tuple[str, int | str]]:
    """OVMS's --grpc_channel_arguments: `name=value,...`; integer values as integers."""
    pairs: list[tuple[str, int | str]] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{name}: expected name=value, got {item!r}")
        value = value.strip()
        pairs.append((key.strip(), int(value) if value.lstrip("-").isdigit() else value))
    return pairs


@dataclass(frozen=True)
class Kind:
    """A setting's type: its name in the settings table and the parser of its text."""

    name: str
    parse: Callable[[str, str], Any]


TEXT = Kind("text", option_text)
BOOL = Kind("bool", option_bool)
INT = Kind("integer", option_int)
POSITIVE = Kind("integer >= 1", option_positive)
COUNT = Kind("integer >= 0", option_count)
PORT = Kind("port", option_port)
NUMBER = Kind("number", option_float)
SECONDS = Kind("number >= 0", option_seconds)
MINUTES = Kind("minutes", minutes_setting)
JSON = Kind("JSON", option_json)
FOLDERS = Kind("folders, `:`-separated", option_folders)
PREFIX = Kind("URL prefix", option_prefix)
CHANNEL_ARGUMENTS = Kind("name=value, comma-separated", channel_arguments)
