"""S3's REST API over http.client, signed with Signature V4: a fresh instance reads its bucket
without boto3, whose import and first client cost ~200 ms of a cold start (more than a
ResNet-50 compile).

Taken when the environment holds the credentials and the region, as on Lambda
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION), with no profile,
proxy, FIPS or dual-stack setting; anything else, or OVS_S3_CLIENT=boto3, takes boto3. It makes
three calls: ListObjectsV2, GetObject, and ranged GetObjects (If-Match the listed ETag) for big
files, with the timeouts, retries and error texts of the boto3 path. A bucket in another
region than AWS_REGION is followed once, from the region S3's redirect or error names.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import http.client
import os
import random
import re
import ssl
import threading
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote, unquote_plus, urlsplit

from core.errors import StorageError
from core.storage.remote import CONNECT_TIMEOUT_S, READ_TIMEOUT_S, RETRIES, RemoteObject

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
RANGED_MIN_BYTES = 16 << 20  # boto3's multipart threshold on the boto3 path
PART_BYTES = 8 << 20
PART_WORKERS = 4
CHUNK_BYTES = 1 << 20
IDLE_MAX = 16  # idle connections kept (the download pool has 8 threads)
_RETRY_STATUS = {429, 500, 502, 503, 504}
_RETRY_CODES = {"RequestTimeout", "SlowDown", "InternalError", "ServiceUnavailable"}
DENIED = {"AccessDenied", "403", "Forbidden", "InvalidAccessKeyId", "SignatureDoesNotMatch",
          "ExpiredToken", "InvalidToken", "AllAccessDisabled"}
MISSING = {"NoSuchKey", "404", "NotFound"}
_PROXIES = ("http_proxy", "https_proxy", "all_proxy")
T = TypeVar("T")
_DNS_LABEL = re.compile(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]")


@dataclass(frozen=True)
class Credentials:
    key: str
    secret: str
    token: str = ""


@dataclass(frozen=True)
class Target:
    """Where a bucket's requests go: `origin` (scheme://host[:port]) and the path before keys."""

    origin: str
    base: str

    @property
    def host(self) -> str:
        return urlsplit(self.origin).netloc


class Failure(Exception):
    """An S3 error response; `region` is set when it names the bucket's other region."""

    def __init__(self, status: int, code: str, message: str, region: str = "") -> None:
        super().__init__(f"{code}: {message}")
        self.status, self.code, self.message, self.region = status, code, message, region

    @property
    def retryable(self) -> bool:
        return self.status in _RETRY_STATUS or self.code in _RETRY_CODES


def choose(endpoint_url: str | None) -> tuple[Credentials, str] | None:
    """(credentials, region) when this client can serve the set-up; None means boto3."""
    env = os.environ
    mode = env.get("OVS_S3_CLIENT", "auto").strip().lower() or "auto"
    if mode not in ("auto", "boto3"):
        raise StorageError(f"OVS_S3_CLIENT must be auto or boto3, not {mode!r}")
    key, secret = env.get("AWS_ACCESS_KEY_ID", ""), env.get("AWS_SECRET_ACCESS_KEY", "")
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or ""
    if endpoint_url and not region:
        region = "us-east-1"  # MinIO and emulators take any region; boto3 signs with this one
    special = (env.get("AWS_PROFILE") or _truthy(env.get("AWS_USE_FIPS_ENDPOINT"))
               or _truthy(env.get("AWS_USE_DUALSTACK_ENDPOINT")) or _proxied(endpoint_url))
    if mode == "boto3" or not (key and secret and region) or special:
        return None
    return Credentials(key, secret, env.get("AWS_SESSION_TOKEN", "")), region


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


def _proxied(endpoint_url: str | None) -> bool:
    """A proxy variable applies (boto3 honours them; this client does not speak to proxies)."""
    if not any(os.environ.get(name) or os.environ.get(name.upper()) for name in _PROXIES):
        return False
    host = (urlsplit(endpoint_url).hostname or "") if endpoint_url else ""
    skip = os.environ.get("no_proxy") or os.environ.get("NO_PROXY") or ""
    entries = [e.strip().lstrip(".") for e in skip.split(",") if e.strip()]
    return not host or not any(e == "*" or host == e or host.endswith("." + e) for e in entries)


def target(bucket: str, endpoint_url: str | None, region: str) -> Target:
    """Path-style on a given endpoint (MinIO, emulators), else AWS's virtual-hosted style
    (path-style for a name that is no DNS label: dots, which the wildcard certificate does not
    cover, or the capitals and underscores of old us-east-1 buckets)."""
    if endpoint_url:
        parts = urlsplit(endpoint_url)
        return Target(f"{parts.scheme}://{parts.netloc}", f"{parts.path.rstrip('/')}/{bucket}")
    domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    if not _DNS_LABEL.fullmatch(bucket):
        return Target(f"https://s3.{region}.{domain}", f"/{bucket}")
    return Target(f"https://{bucket}.s3.{region}.{domain}", "")


def signed_headers(method: str, host: str, path: str, query: dict[str, str],
                   headers: dict[str, str], creds: Credentials, region: str,
                   now: datetime) -> dict[str, str]:
    """`headers` plus host, x-amz-* and the SigV4 Authorization for a bodiless request."""
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    out = {**headers, "host": host, "x-amz-date": stamp, "x-amz-content-sha256": EMPTY_SHA256}
    if creds.token:
        out["x-amz-security-token"] = creds.token
    lowered = {name.lower(): " ".join(value.split()) for name, value in out.items()}
    names = sorted(lowered)
    canonical = "\n".join([
        method, quote(path, safe="/~"), canonical_query(query),
        *(f"{name}:{lowered[name]}" for name in names), "", ";".join(names), EMPTY_SHA256,
    ])
    scope = f"{stamp[:8]}/{region}/s3/aws4_request"
    to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{_sha256(canonical)}"
    key = f"AWS4{creds.secret}".encode()
    for part in (stamp[:8], region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    out["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={creds.key}/{scope}, "
                            f"SignedHeaders={';'.join(names)}, Signature={signature}")
    return out


def canonical_query(query: dict[str, str]) -> str:
    pairs = sorted((quote(k, safe="~"), quote(v, safe="~")) for k, v in query.items())
    return "&".join(f"{k}={v}" for k, v in pairs)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def describe(code: str, message: str, bucket: str) -> str:
    """The cause of an S3 error in words, as both S3 paths report it."""
    if code == "NoSuchBucket":
        return f"bucket '{bucket}' does not exist"
    if code in DENIED:
        return f"access denied ({code}): {message or code}"
    if code in MISSING:
        return "object not found"
    return f"{code}: {message or code}"


class S3RestBackend:
    """One bucket through S3's REST API; the Backend protocol of core.storage.remote."""

    scheme = "s3"

    def __init__(self, bucket: str, endpoint_url: str | None, creds: Credentials,
                 region: str) -> None:
        self.bucket = bucket
        self._endpoint_url = endpoint_url
        self._creds = creds
        self._site = (region, target(bucket, endpoint_url, region))
        self._idle: list[tuple[str, http.client.HTTPConnection]] = []
        self._lock = threading.Lock()

    def list_objects(self, prefix: str) -> Iterator[RemoteObject]:
        query = {"list-type": "2", "prefix": prefix, "encoding-type": "url"}
        while True:
            root = _parse(self._call("", query, {}, f"list {self._url(prefix)}", _read))
            for item in root.iter("Contents"):
                # encoding-type=url: S3 writes a space as '+' and a '+' as %2B (as botocore reads)
                yield RemoteObject(unquote_plus(_text(item, "Key")), int(_text(item, "Size")),
                                   _text(item, "ETag"))
            token = _text(root, "NextContinuationToken")
            if _text(root, "IsTruncated") != "true" or not token:
                return
            query["continuation-token"] = token

    def read(self, key: str) -> bytes:
        return self._call(key, {}, {}, f"read {self._url(key)}", _read)

    def download(self, obj: RemoteObject, dest: Path) -> None:
        what = f"download {self._url(obj.key)}"
        with open(dest, "wb") as file:
            fd = file.fileno()
            if obj.size < RANGED_MIN_BYTES:
                self._call(obj.key, {}, {}, what, lambda r: _copy(r, fd, 0, truncate=True))
                return
            os.ftruncate(fd, obj.size)
            with ThreadPoolExecutor(PART_WORKERS) as pool:
                list(pool.map(lambda start: self._part(obj, start, fd, what),
                              range(0, obj.size, PART_BYTES)))

    def _part(self, obj: RemoteObject, start: int, fd: int, what: str) -> None:
        """One PART_BYTES range; If-Match makes a file replaced since the listing a 412."""
        end = min(start + PART_BYTES, obj.size) - 1
        headers = {"Range": f"bytes={start}-{end}", "If-Match": obj.tag}
        got = self._call(obj.key, {}, headers, what, lambda r: _copy(r, fd, start))
        if got != end - start + 1:
            raise StorageError(f"Cannot {what}: got {got} bytes of range {start}-{end}")

    def _url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def _call(self, key: str, query: dict[str, str], headers: dict[str, str], what: str,
              use: Callable[[http.client.HTTPResponse], T]) -> T:
        """GET the key, retrying what boto3 retries; `use(response)` reads a 2xx response."""
        attempt, moved = 0, False
        while True:
            try:
                return self._once(key, query, headers, use)
            except Failure as exc:
                if exc.region and exc.region != self._site[0] and not moved:
                    moved = True  # the bucket lives in another region: once, at no attempt's cost
                    self._move(exc.region)
                    continue
                if not exc.retryable or attempt >= RETRIES:
                    cause = describe(exc.code, exc.message, self.bucket)
                    raise StorageError(f"Cannot {what}: {cause}") from exc
            except (OSError, http.client.HTTPException) as exc:
                if attempt >= RETRIES:
                    raise StorageError(f"Cannot {what}: cannot reach the S3 endpoint: "
                                       f"{type(exc).__name__}: {exc}") from exc
            attempt += 1
            _backoff(attempt)

    def _once(self, key: str, query: dict[str, str], headers: dict[str, str],
              use: Callable[[http.client.HTTPResponse], T]) -> T:
        region, site = self._site
        path = f"{site.base}/{key}"
        signed = signed_headers("GET", site.host, path, query, headers, self._creds, region,
                                datetime.now(UTC))
        url = quote(path, safe="/~") + (f"?{canonical_query(query)}" if query else "")
        conn, response = self._send(site.origin, url, signed)
        try:
            if response.status >= 300:
                raise _failure(response, response.read())
            result = use(response)
        except BaseException:
            conn.close()
            raise
        self._give(site.origin, conn, response)
        return result

    def _send(self, origin: str, url: str, headers: dict[str, str]
              ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """The request on an idle connection if one is open, else on a new one. A server may
        close an idle connection at any time (S3 does after a few seconds): then it goes
        again at once on a new one, costing no retry."""
        conn = self._idle_connection(origin)
        if conn is not None:
            try:
                conn.request("GET", url, headers=headers)
                return conn, conn.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                conn.close()
        conn = self._new_connection(origin)
        try:
            conn.request("GET", url, headers=headers)
            return conn, conn.getresponse()
        except BaseException:
            conn.close()
            raise

    def _move(self, region: str) -> None:
        with self._lock:
            self._site = (region, target(self.bucket, self._endpoint_url, region))

    def _idle_connection(self, origin: str) -> http.client.HTTPConnection | None:
        with self._lock:
            for i, (where, conn) in enumerate(self._idle):
                if where == origin:
                    del self._idle[i]
                    return conn
        return None

    def _new_connection(self, origin: str) -> http.client.HTTPConnection:
        parts = urlsplit(origin)
        conn = (http.client.HTTPSConnection(parts.netloc, timeout=CONNECT_TIMEOUT_S,
                                            context=_tls())
                if parts.scheme == "https"
                else http.client.HTTPConnection(parts.netloc, timeout=CONNECT_TIMEOUT_S))
        conn.connect()
        assert conn.sock is not None
        conn.sock.settimeout(READ_TIMEOUT_S)
        return conn

    def _give(self, origin: str, conn: http.client.HTTPConnection,
              response: http.client.HTTPResponse) -> None:
        """Keep a connection whose response was read to its end, for the next request."""
        if not response.will_close and response.isclosed():
            with self._lock:
                if len(self._idle) < IDLE_MAX:
                    self._idle.append((origin, conn))
                    return
        conn.close()


def _backoff(attempt: int) -> None:
    time.sleep(random.uniform(0, min(2.0, 0.25 * 2**attempt)))


def _read(response: http.client.HTTPResponse) -> bytes:
    return response.read()


def _copy(response: http.client.HTTPResponse, fd: int, start: int,
          truncate: bool = False) -> int:
    """The body into fd from offset `start`; -> bytes written. `truncate`: a whole file, whose
    retry must not keep a failed attempt's tail."""
    if truncate:
        os.ftruncate(fd, start)
    written = 0
    while chunk := response.read(CHUNK_BYTES):
        view = memoryview(chunk)
        while view:
            n = os.pwrite(fd, view, start + written)
            view, written = view[n:], written + n
    return written


def _failure(response: http.client.HTTPResponse, body: bytes) -> Failure:
    code, message = str(response.status), response.reason
    region = response.getheader("x-amz-bucket-region", "")
    try:
        root = _parse(body)
        code, message = _text(root, "Code") or code, _text(root, "Message") or message
        region = region or _text(root, "Region")
    except ElementTree.ParseError:
        pass
    moved = response.status in (301, 307, 400) and region
    return Failure(response.status, code, message, region if moved else "")


def _parse(body: bytes) -> ElementTree.Element:
    """XML without its namespace (S3 and MinIO send one, some emulators none)."""
    root = ElementTree.fromstring(body)
    for element in root.iter():
        element.tag = element.tag.rpartition("}")[2]
    return root


def _text(element: ElementTree.Element, name: str) -> str:
    return element.findtext(name) or ""


@functools.lru_cache(maxsize=1)
def _tls() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=os.environ.get("AWS_CA_BUNDLE") or None)
