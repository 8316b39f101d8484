"""The small HTTP client the REST storage clients (s3/, gcs/, azure/ rest.py) share: keep-alive
connections, GETs retried with backoff as the SDKs retry, bodies copied into a file (by
ranges, in parallel, for big files) and checked against the object's digest, XML read without
namespaces, and the proxy check that sends a set-up with a proxy to the SDK (these clients do
not speak to proxies).
"""

from __future__ import annotations

import http.client
import logging
import os
import random
import ssl
import threading
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

from core.storage import checksums
from core.storage.backend import CONNECT_TIMEOUT_S, READ_TIMEOUT_S, RETRIES, RemoteObject
from core.storage.checksums import Check, Digest, Updater
from core.storage.folders import disk_full
from core.storage.secrets import StorageError

RANGED_MIN_BYTES = 16 << 20  # boto3's multipart threshold on the boto3 path
PART_BYTES = 8 << 20
PART_WORKERS = 4
CHUNK_BYTES = 1 << 20
IDLE_MAX = 16  # idle connections kept (the download pool has 8 threads)
RETRY_STATUS = {408, 429, 500, 502, 503, 504}
_PROXIES = ("http_proxy", "https_proxy", "all_proxy")
T = TypeVar("T")
Response = http.client.HTTPResponse
Get = Callable[[dict[str, str], Callable[[Response], T]], T]  # (extra headers, use) -> use()
DigestOf = Callable[[Response], Digest | None]  # the object's digest a response names
log = logging.getLogger("ov_serverless.storage")


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


IGNORED_RANGE = "; the endpoint, or a proxy before it, ignored the Range header"


Headers = Message  # an answer's headers (Response.msg): get(name, default), any case
NO_HEADERS = Message()


@dataclass(frozen=True)
class Ranges:
    """How a provider reads a big file in ranges and checks them. By default: PART_BYTES
    ranges, checked against a CRC of the whole object the first range's answer names (hashed
    in order from disk, each range once it is in: a CRC costs little beside the download).

    `headers` go with every range. `side()` is a request run beside the ranges (S3 names no
    checksum in a ranged answer: a HEAD does); its answer's headers (NO_HEADERS when it failed)
    go to `hashes`, `named` and `whole`. `hashes(side)`: the algorithms each range's bytes are
    hashed with in its worker as they arrive (only then does a worker wait for the side
    answer), for `part(answer, digests)` (the range's own digest, as Azure gives it) and
    `whole(digests of each range in order, side)` (a digest made of the parts',
    as S3's multipart ETag and composite checksums are). `named(side)`: the whole object's
    digest, hashed in order when its algorithm is `in_order`; `tentative(side)`: that digest
    may be of another kind, so a mismatch of it refuses nothing. Checks return '' when the
    bytes match, the words of the error when not, None when they cannot tell. The file is
    refused when no check passed and one failed."""

    size: int = PART_BYTES
    headers: dict[str, str] = field(default_factory=dict)
    side: Callable[[], Headers] | None = None
    hashes: Callable[[Headers], frozenset[str]] | None = None
    part: Callable[[Response, dict[str, bytes]], str | None] | None = None
    whole: Callable[[list[dict[str, bytes]], Headers], str | None] | None = None
    named: Callable[[Headers], Digest | None] = lambda _: None
    tentative: Callable[[Headers], bool] = lambda _: False
    in_order: frozenset[str] = checksums.FAST


@dataclass(frozen=True)
class _Got:
    """A range's answer, its bytes' digests (by algorithm) and whether `part` checked it."""

    answer: Response
    digests: dict[str, bytes]
    checked: bool


def download(
    obj: RemoteObject,
    dest: Path,
    what: str,
    get: Get[int],
    whole_hint: str = IGNORED_RANGE,
    digest: DigestOf = lambda _: None,
    whole: dict[str, str] | None = None,
    ranges: Ranges | None = None,
) -> None:
    """obj into dest: one GET (with the `whole` headers), hashed as it comes against the
    `digest(response)` it names; or for a big file, `ranges` (see Ranges) PART_WORKERS at a
    time, each If-Match the listed tag, so a file replaced since the listing fails (412).
    `whole_hint` ends the error for a range answered with the whole object (the provider's
    likely cause). A mismatch is a StorageError; the caller drops the file."""
    with open(dest, "w+b") as file:  # read too: a big file's CRC is computed from disk
        fd = file.fileno()
        if obj.size >= RANGED_MIN_BYTES:
            _ranged(obj, fd, what, get, whole_hint, digest, ranges or Ranges())
            return
        checks: list[Check | None] = []  # one per attempt (a retry starts over)

        def use(response: Response) -> int:
            checks.append(checksums.start(digest(response)))
            return copy(response, fd, 0, truncate=True, check=checks[-1])

        get(whole or {}, use)
        _verify(what, checks[-1])


def _ranged(
    obj: RemoteObject,
    fd: int,
    what: str,
    get: Get[int],
    whole_hint: str,
    digest: DigestOf,
    ranges: Ranges,
) -> None:
    os.ftruncate(fd, obj.size)
    starts = range(0, obj.size, ranges.size)
    got: list[_Got] = []
    check: Check | None = None
    with ThreadPoolExecutor(PART_WORKERS + (ranges.side is not None)) as pool:
        side = _beside(pool, ranges.side)
        parts = [
            pool.submit(_part, obj, start, fd, what, get, whole_hint, ranges, side)
            for start in starts
        ]
        try:
            for start, part in zip(starts, parts, strict=True):
                got.append(part.result())
                if start == 0:
                    named = ranges.named(side()) or digest(got[0].answer)
                    check = checksums.start(named, ranges.in_order)
                if check is not None:
                    _hash_range(fd, start, min(start + ranges.size, obj.size), check)
        except BaseException:
            for part in parts:
                part.cancel()  # no more ranges of a failed download
            raise
    in_order = check.problem() if check is not None else None
    if in_order and ranges.tentative(side()):
        in_order = None
    made = None
    if ranges.whole is not None and got[0].digests:
        made = ranges.whole([g.digests for g in got], side())
    told = [result for result in (in_order, made) if result is not None]
    if told and "" not in told:
        raise StorageError(f"{what}: {told[0]}")
    if not told and not all(g.checked for g in got):
        log.debug(
            "%s: not verified (read in ranges, and the service names no checksum of them "
            "this client can compute)",
            what.removeprefix("Cannot "),
        )


def _beside(
    pool: ThreadPoolExecutor, request: Callable[[], Headers] | None
) -> Callable[[], Headers]:
    """`request` started in `pool`; -> a call waiting for its answer's headers (NO_HEADERS
    when there is no request or it failed: the download goes on without what it tells)."""
    future = pool.submit(request) if request is not None else None

    def answer() -> Headers:
        if future is None:
            return NO_HEADERS
        try:
            return future.result()
        except StorageError as exc:
            log.debug("no checksum from the request beside the ranges: %s", exc)
            return NO_HEADERS

    return answer


def _part(
    obj: RemoteObject,
    start: int,
    fd: int,
    what: str,
    get: Get[int],
    whole_hint: str,
    ranges: Ranges,
    side: Callable[[], Headers],
) -> _Got:
    end = min(start + ranges.size, obj.size) - 1
    got: list[_Got] = []  # the last attempt's

    def use(response: Response) -> int:
        _partial(response, f"{what}: bytes {start}-{end}", whole_hint)
        hashers = _hashers(ranges.hashes(side())) if ranges.hashes is not None else {}
        fanout = _Fanout(list(hashers.values())) if hashers else None
        written = copy(response, fd, start, check=fanout)
        digests = {name: hasher.digest() for name, hasher in hashers.items()}
        problem = ranges.part(response, digests) if ranges.part is not None else None
        if problem:
            raise StorageError(f"{what}: bytes {start}-{end}: {problem}")
        got.append(_Got(response, digests, problem is not None))
        return written

    headers = {**ranges.headers, "Range": f"bytes={start}-{end}", "If-Match": obj.tag}
    written = get(headers, use)
    if written != end - start + 1:
        raise StorageError(f"{what}: got {written} bytes of range {start}-{end}")
    return got[-1]


def _hashers(algorithms: frozenset[str]) -> dict[str, checksums.Hasher]:
    hashers = {name: checksums.new_hasher(name) for name in algorithms}
    return {name: hasher for name, hasher in hashers.items() if hasher is not None}


class _Fanout:
    """Every chunk to each hasher."""

    def __init__(self, hashers: list[checksums.Hasher]) -> None:
        self._hashers = hashers

    def update(self, data: bytes | memoryview, /) -> None:
        for hasher in self._hashers:
            hasher.update(data)


def _hash_range(fd: int, start: int, end: int, check: Check) -> None:
    while start < end:
        chunk = os.pread(fd, min(CHUNK_BYTES, end - start), start)
        if not chunk:
            break
        check.update(chunk)
        start += len(chunk)


def _verify(what: str, check: Check | None) -> None:
    problem = check.problem() if check is not None else ""
    if problem:
        raise StorageError(f"{what}: {problem}")


def _partial(response: Response, what: str, whole_hint: str) -> Response:
    """A ranged answer, or the error for a whole object (written at the part's offset it
    would corrupt the file)."""
    if response.status != 206:
        raise StorageError(
            f"{what} were answered {response.status} with the whole object{whole_hint}"
        )
    return response


def copy(
    response: Response, fd: int, start: int, truncate: bool = False, check: Updater | None = None
) -> int:
    """The body into fd from offset `start`; -> bytes written. `truncate`: a whole file, whose
    retry must not keep a failed attempt's tail. `check`: its hasher sees every byte."""
    if truncate:
        os.ftruncate(fd, start)
    written = 0
    while chunk := response.read(CHUNK_BYTES):
        if check is not None:
            check.update(chunk)
        view = memoryview(chunk)
        while view:
            n = os.pwrite(fd, view, start + written)
            view, written = view[n:], written + n
    return written


def read(response: Response) -> bytes:
    return response.read()


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
