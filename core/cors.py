"""CORS, as OVMS's flags set it: --allowed_origins, --allowed_methods, --allowed_headers
(comma-separated, `*` by default) and --allow_credentials (off); OVS_ALLOWED_ORIGINS,
OVS_ALLOWED_METHODS, OVS_ALLOWED_HEADERS and OVS_ALLOW_CREDENTIALS on serverless hosts.

OVMS puts the configured values on every REST response, literally, and answers OPTIONS as an
unsupported method, so a browser's preflight (sent before any JSON or binary POST from another
origin) fails there. Here a preflight gets 204. Where the literal value is one a browser
refuses, the request's own value is sent back, as the Fetch standard asks: one origin out of a
list (a list is not a valid Access-Control-Allow-Origin), and the origin, method and headers
of a request with credentials (for which `*` is no wildcard). An empty origin list turns CORS
off: no Access-Control-* header, and OPTIONS is an unsupported method again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

ORIGIN = "access-control-allow-origin"
METHODS = "access-control-allow-methods"
HEADERS = "access-control-allow-headers"
CREDENTIALS = "access-control-allow-credentials"


@dataclass(frozen=True)
class CorsConfig:
    origins: tuple[str, ...] = ("*",)  # () turns CORS off
    methods: str = "*"
    headers: str = "*"
    credentials: bool = False

    @classmethod
    def from_flags(
        cls, origins: str = "*", methods: str = "*", headers: str = "*", credentials: bool = False
    ) -> CorsConfig:
        """The flags' comma-separated lists; blanks around items are dropped."""
        return cls(
            _items(origins), ", ".join(_items(methods)), ", ".join(_items(headers)), credentials
        )


def _items(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(item.strip() for item in text.split(",") if item.strip()))


class Cors:
    """The Access-Control-* headers of one configuration. With the default (`*`, no
    credentials) they are the same prebuilt mapping for every response."""

    def __init__(self, config: CorsConfig) -> None:
        self.config = config
        self.enabled = bool(config.origins)
        self._any_origin = "*" in config.origins
        self._static = self._any_origin and not config.credentials
        fixed = {METHODS: config.methods, HEADERS: config.headers}
        if config.credentials:
            fixed[CREDENTIALS] = "true"
        if self._static:
            fixed[ORIGIN] = "*"
        else:
            fixed["vary"] = "Origin"  # the answer depends on it: caches must key on it
        self._fixed = {name: value for name, value in fixed.items() if value}

    @staticmethod
    def is_preflight(method: str, headers: Mapping[str, str]) -> bool:
        return (
            method == "OPTIONS"
            and "origin" in headers
            and "access-control-request-method" in headers
        )

    def headers(self, request: Mapping[str, str], preflight: bool = False) -> Mapping[str, str]:
        """The headers to add to the response of a request with these (lower-case) headers."""
        if not self.enabled:
            return {}
        if self._static:
            return self._fixed
        out = dict(self._fixed)
        origin = request.get("origin", "")
        if origin and (self._any_origin or origin in self.config.origins):
            out[ORIGIN] = origin
        if preflight and self.config.credentials:  # `*` is literal with credentials
            if self.config.methods == "*":
                out[METHODS] = request.get("access-control-request-method", "*")
            if self.config.headers == "*" and "access-control-request-headers" in request:
                out[HEADERS] = request["access-control-request-headers"]
        return out
