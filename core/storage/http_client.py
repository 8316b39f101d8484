"""The small HTTP client the REST storage clients (s3/, gcs/, azure/ rest.py) share: keep-alive
connections, GETs retried with backoff as the SDKs retry, XML read without namespaces, and
the proxy check that sends a set-up with a proxy to the SDK (these clients do not speak to
proxies). The download of an object over it is download.py.
"""

from __future__ import annotations

import http.client
import os
import random
import ssl
import threading
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from email.message import Message
from typing import TypeVar
from urllib.parse import urlsplit

from core.storage.backend import CONNECT_TIMEOUT_S, READ_TIMEOUT_S, RETRIES
from core.storage.folders import disk_full
from core.storage.secrets import StorageError

IDLE_MAX = 16  # idle connections kept (the download pool has 8 threads)
RETRY_STATUS = {408, 429, 500, 502, 503, 504}
_PROXIES = ("http_proxy", "https_proxy", "all_proxy")
T = TypeVar("T")
Response = http.client.HTTPResponse
Headers = Message  # an answer's headers (Response.msg): get(name, default), any case


class Failure(Exception):
    """An error response. `retry_codes`: the provider's error codes worth another try."""

    retry_codes: frozenset[str] = frozenset()

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.status, self.code, self.message = status, code, message

    @property
    def retryable(self) -> bool:
        return self.status in RETRY_STATUS or self.code in self.retry_codes


def retrying(
    once: Callable[[], T],
    fail: Callable[[Failure], StorageError],
    unreachable: str,
    redirect: Callable[[Failure], bool] = lambda _: False,
) -> T:
    """once(), again after a retryable Failure or a connection error, up to RETRIES times.
    `redirect(failure)` may point the client elsewhere (S3's other region): that goes again
    once at no retry's cost. `fail` words a final Failure; `unreachable` starts the text of a
    final connection error (its part before the last ': ', of a request that cannot be
    sent). A full disk is no network error: it goes on at once, as is; a
    request http.client refuses to send (a control character in a URL or header, as a
    credential read from a file with its newline has) is not retried either."""
    attempt, moved = 0, False
    while True:
        try:
            return once()
        except Failure as exc:
            if not moved and redirect(exc):
                moved = True
                continue
            if not exc.retryable or attempt >= RETRIES:
                raise fail(exc) from exc
        except (http.client.InvalidURL, ValueError) as exc:
            cause = unreachable.rpartition(": ")[0] or unreachable
            raise StorageError(
                f"{cause}: the request cannot be sent ({type(exc).__name__}: "
                f"{exc}); check the endpoint and credentials for stray "
                "characters, such as a newline"
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            if disk_full(exc):
                raise
            if attempt >= RETRIES:
                raise StorageError(f"{unreachable}: {type(exc).__name__}: {exc}") from exc
        attempt += 1
        backoff(attempt)


def backoff(attempt: int) -> None:
    time.sleep(random.uniform(0, min(2.0, 0.25 * 2**attempt)))


class Connections:
    """Keep-alive HTTP(S) connections, idle ones kept for the next request to their origin.
    `cafile_env` names the variable with a CA bundle for TLS (the SDK's own)."""

    def __init__(self, cafile_env: str) -> None:
        self._cafile_env = cafile_env
        self._idle: list[tuple[str, http.client.HTTPConnection]] = []
        self._lock = threading.Lock()

    def get(
        self,
        origin: str,
        url: str,
        headers: dict[str, str],
        failure: Callable[[Response, bytes], Failure],
        use: Callable[[Response], T],
        method: str = "GET",
    ) -> T:
        """GET (or `method`) origin+url; `use(response)` reads a 2xx response, anything else
        raises failure(response, body)."""
        conn, response = self._send(origin, url, headers, method)
        try:
            if response.status >= 300:
                raise failure(response, response.read())
            result = use(response)
        except BaseException:
            conn.close()
            raise
        self._give(origin, conn, response)
        return result

    def _send(
        self, origin: str, url: str, headers: dict[str, str], method: str
    ) -> tuple[http.client.HTTPConnection, Response]:
        """The request on an idle connection if one is open, else on a new one. A server may
        close an idle connection at any time (S3 does after a few seconds): then it goes
        again at once on a new one, costing no retry."""
        conn = self._idle_connection(origin)
        if conn is not None:
            try:
                conn.request(method, url, headers=headers)
                return conn, conn.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                conn.close()
        conn = self._new_connection(origin)
        try:
            conn.request(method, url, headers=headers)
            return conn, conn.getresponse()
        except BaseException:
            conn.close()
            raise

    def _idle_connection(self, origin: str) -> http.client.HTTPConnection | None:
        with self._lock:
            for i, (where, conn) in enumerate(self._idle):
                if where == origin:
                    del self._idle[i]
                    return conn
        return None

    def _new_connection(self, origin: str) -> http.client.HTTPConnection:
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https"):  # a typo of https must not go in clear
            raise ValueError(
                f"the endpoint {origin} has the scheme {parts.scheme!r}: only http:// and "
                "https:// are taken"
            )
        conn = (
            http.client.HTTPSConnection(
                parts.netloc,
                timeout=CONNECT_TIMEOUT_S,
                context=tls(os.environ.get(self._cafile_env)),
            )
            if parts.scheme == "https"
            else http.client.HTTPConnection(parts.netloc, timeout=CONNECT_TIMEOUT_S)
        )
        conn.connect()
        assert conn.sock is not None
        conn.sock.settimeout(READ_TIMEOUT_S)
        return conn

    def _give(self, origin: str, conn: http.client.HTTPConnection, response: Response) -> None:
        """Keep a connection whose response was read to its end, for the next request."""
        if not response.will_close and response.isclosed():
            with self._lock:
                if len(self._idle) < IDLE_MAX:
                    self._idle.append((origin, conn))
                    return
        conn.close()


_contexts: dict[str | None, ssl.SSLContext] = {}


def tls(cafile: str | None) -> ssl.SSLContext:
    if cafile not in _contexts:  # a race builds two equal contexts: harmless
        _contexts[cafile] = ssl.create_default_context(cafile=cafile or None)
    return _contexts[cafile]


def read(response: Response) -> bytes:
    return response.read()


@contextmanager
def listing(what: str) -> Iterator[None]:
    """A listing's 2xx answer that does not read as one (a web page from a wrong port, a
    proxy's page) as a StorageError starting with `what`, not a parser's exception."""
    try:
        yield
    except (ElementTree.ParseError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StorageError(
            f"{what}: the endpoint's answer is not a listing ({type(exc).__name__}: {exc}); "
            "check the endpoint"
        ) from None


def parse_xml(body: bytes) -> ElementTree.Element:
    """XML without its namespace (S3 and MinIO send one, some emulators none)."""
    root = ElementTree.fromstring(body)
    for element in root.iter():
        element.tag = element.tag.rpartition("}")[2]
    return root


def text(element: ElementTree.Element, path: str) -> str:
    return element.findtext(path) or ""


def proxied(endpoint_url: str | None) -> bool:
    """A proxy variable applies to the endpoint (the SDKs honour them; these clients not)."""
    if not any(os.environ.get(name) or os.environ.get(name.upper()) for name in _PROXIES):
        return False
    host = (urlsplit(endpoint_url).hostname or "") if endpoint_url else ""
    skip = os.environ.get("no_proxy") or os.environ.get("NO_PROXY") or ""
    entries = [e.strip().lstrip(".") for e in skip.split(",") if e.strip()]
    return not host or not any(e == "*" or host == e or host.endswith("." + e) for e in entries)
