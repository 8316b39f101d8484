"""glibc malloc settings for a process that serves models.

Every request allocates and frees buffers of hundreds of KB to a few MB (the body, decoded
inputs, outputs). By default glibc hands such blocks back to the kernel on free (mmap'd
chunks, trimmed thread arenas), so the next request faults every page in again. On a
Firecracker VM (Lambda, this bench machine) a fault costs microseconds: a 600 KB body meant
~180 faults and ~0.5 ms per request. Keeping freed memory in the process removes them; the
idle RSS stays at the request peak instead of dropping below it.
"""

from __future__ import annotations

import ctypes
import logging
import sys

log = logging.getLogger("ov_serverless.memory")

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Blocks below this come from the arenas and are kept for reuse; bigger ones (a compiled-blob
# export, a huge batch) are still mapped and unmapped on their own, so the idle RSS stays near
# what the requests need.
MMAP_THRESHOLD = 8 << 20
TRIM_THRESHOLD = 32 << 20  # free memory an arena keeps at its top before it gives it back


def keep_freed_memory() -> bool:
    """Apply the settings (idempotent); False where the C library is not glibc (musl, macOS)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    done = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    done = mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and done
    if not done:
        log.warning("mallopt refused the serving settings; big buffers fault in per request")
    return done
