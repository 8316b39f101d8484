"""One-time warnings about a model's configuration (a deprecated key, "auto"): a reload does not
repeat them."""

from __future__ import annotations

import logging

log = logging.getLogger("ov_serverless.config")
_noticed: set[tuple[str, str]] = set()  # (model, key)


def notice_once(model: str, key: str, message: str) -> None:
    if (model, key) not in _noticed:
        _noticed.add((model, key))
        log.warning("%s (model %s)", message, model)
