"""target_device as OVMS and OpenVINO write it: CPU, GPU, GPU.1, NPU, AUTO, AUTO:GPU,CPU,
HETERO:GPU,CPU, MULTI:GPU,CPU, BATCH:GPU(4).

`check` runs at config load: devices OpenVINO no longer has are refused there. `resolve` runs
before a compile: a device this host lacks fails that version with a message naming it (not the
plugin library OpenVINO failed to open), and AUTO's candidate list keeps the ones present, since
AUTO picks among available devices.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from core.errors import ConfigError, ServingError

if TYPE_CHECKING:
    import openvino as ov

log = logging.getLogger("ov_serverless.devices")

VIRTUAL = ("AUTO", "MULTI", "HETERO", "BATCH")
DROPPED = {
    "MYRIAD": "Intel Neural Compute Stick 2 (Movidius Myriad X)",
    "HDDL": "Intel Vision Accelerator Design with Movidius VPUs",
}


def candidates(target: str) -> tuple[str, list[str]]:
    """("AUTO", ["GPU", "CPU"]) for "AUTO:GPU,CPU"; ("", ["GPU.1"]) for "GPU.1"."""
    kind, sep, rest = target.partition(":")
    if kind in VIRTUAL:
        return kind, [item.strip() for item in rest.split(",")] if sep else []
    return "", [target.strip()]


def _base(candidate: str) -> str:
    """The plugin name: "GPU" for "GPU.1", "GPU(4)" and "-GPU" (AUTO's exclusion)."""
    return candidate.lstrip("-").split("(")[0].split(".")[0]


def check(target: str, path: str) -> str:
    """Refuse devices OpenVINO dropped and empty lists at config load; -> target."""
    kind, listed = candidates(target)
    if any(not item for item in listed) or (kind in ("MULTI", "HETERO", "BATCH") and not listed):
        raise ConfigError(
            f"{path}: {target!r} names no device; write e.g. {kind or 'AUTO'}:GPU,CPU"
        )
    for item in listed:
        name = _base(item)
        if name in DROPPED:
            raise ConfigError(
                f"{path}: {name} is not supported: OpenVINO dropped the {name} plugin "
                f"({DROPPED[name]}) in 2023.0; use CPU, GPU, NPU or AUTO"
            )
    return target


def resolve(core: ov.Core, target: str) -> str:
    """The device string to compile for on this host; ServingError when a device is missing."""
    kind, listed = candidates(target)
    if all(item.startswith("-") for item in listed):
        return target  # plain AUTO, or AUTO that only excludes: AUTO chooses
    available = list(core.available_devices)
    present = [item for item in listed if item.startswith("-") or _has(available, item)]
    if kind == "AUTO" and listed:
        if not any(not item.startswith("-") for item in present):
            raise _missing(target, listed, available)
        if present != listed:
            kept = f"AUTO:{','.join(present)}"
            log.info(
                "target_device %s: %s not on this host; compiling for %s",
                target,
                ", ".join(i for i in listed if i not in present),
                kept,
            )
            return kept
        return target
    if present != listed:
        raise _missing(target, [i for i in listed if i not in present], available)
    return target


def _has(available: list[str], device: str) -> bool:
    plain = device.split("(")[0]
    return plain in available or (
        "." not in plain and any(a.split(".")[0] == plain for a in available)
    )


def _missing(target: str, missing: list[str], available: list[str]) -> ServingError:
    return ServingError(
        f"target_device {target}: {', '.join(missing)} not available on this host "
        f"(OpenVINO sees: {', '.join(available) or 'no device'})"
    )
