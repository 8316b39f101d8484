"""Which client reads a provider's buckets: `OVS_S3_CLIENT`, `OVS_GCS_CLIENT`,
`OVS_AZURE_CLIENT`, each `auto` (default), `sdk` or `rest`.

    auto  the REST client (rest.py: stdlib only, no SDK import on a cold start) where it serves
          the set-up exactly as the SDK would, else the SDK
    sdk   the official SDK always (`boto3` is the same for S3: its value before `sdk`)
    rest  the REST client always; a set-up it cannot serve (credentials it does not read, a
          proxy...) is a StorageError that says why, never a silent switch to the SDK
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Literal, TypeVar

from core.storage.secrets import StorageError

Mode = Literal["auto", "sdk", "rest"]
MODES: tuple[Mode, ...] = ("auto", "sdk", "rest")
ALIASES: dict[str, Mode] = {"boto3": "sdk"}  # OVS_S3_CLIENT's older value
T = TypeVar("T")


def mode(variable: str, aliases: dict[str, Mode] | None = None) -> Mode:
    """The mode `variable` sets; `aliases` are older values the variable still takes."""
    value = os.environ.get(variable, "auto").strip().lower() or "auto"
    for known in MODES:
        if value == known:
            return known
    if aliases and value in aliases:
        return aliases[value]
    older = "".join(f" ({old} is {new})" for old, new in (aliases or {}).items())
    raise StorageError(f"{variable} must be auto, sdk or rest{older}, not {value!r}")


def choose(
    variable: str, rest_setup: Callable[[], T | str], aliases: dict[str, Mode] | None = None
) -> T | None:
    """What the REST client reads with, or None for the SDK: `rest_setup()` gives the REST
    client's set-up from the environment, or (a str) why it cannot serve it."""
    chosen = mode(variable, aliases)
    if chosen == "sdk":
        return None
    found = rest_setup()
    if isinstance(found, str):
        if chosen == "rest":
            raise refused(variable, found)
        return None
    return found


def refused(variable: str, reason: str) -> StorageError:
    """The error of `<variable>=rest` for a set-up the REST client cannot serve."""
    return StorageError(
        f"{variable}=rest, but the REST client cannot serve this set-up: "
        f"{reason}; set {variable}=auto or sdk to read it through the SDK"
    )
