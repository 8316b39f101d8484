"""S3's REST API over http.client, signed with Signature V4: a fresh instance reads its bucket
without boto3, whose import and first client cost ~200 ms of a cold start (more than a
ResNet-50 compile).

It serves a set-up where the environment holds the credentials and the region, as on Lambda
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION), with no profile,
proxy, FIPS or dual-stack setting (from_environment says why not otherwise). It makes
three calls: ListObjectsV2, GetObject, and ranged GetObjects (If-Match the listed ETag) for big
files, with the timeouts, retries and error texts of the boto3 path. A bucket in another
region than AWS_REGION is followed once, from the region S3's redirect or error names.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import logging
import os
import re
import threading
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote, unquote_plus, urlsplit

from core.storage import checksums, http_client
from core.storage.backend import RemoteObject
from core.storage.s3 import describe
from core.storage.secrets import StorageError

log = logging.getLogger("ov_serverless.storage")

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
T = TypeVar("T")
_DNS_LABEL = re.compile(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]")
_MULTIPART_ETAG = re.compile(r"[0-9a-fA-F]{32}-([0-9]{1,5})")
# Full-object checksums GetObject names with x-amz-checksum-mode: ENABLED, best first (those
# with a fast hasher here; CRC64NVME has none in the standard library)
CHECKSUMS = ("crc32", "crc32c", "sha256", "sha1")
CHECKSUM_MODE = {"x-amz-checksum-mode": "ENABLED"}


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


class Failure(http_client.Failure):
    """An S3 error response; `region` is set when it names the bucket's other region."""

    retry_codes = frozenset({"RequestTimeout", "SlowDown", "InternalError", "ServiceUnavailable"})

    def __init__(self, status: int, code: str, message: str, region: str = "") -> None:
        super().__init__(status, code, message)
        self.region = region


def from_environment(endpoint_url: str | None) -> tuple[Credentials, str] | str:
    """(credentials, region) this client signs with, from the environment; or why it cannot
    serve the set-up as boto3 would."""
    env = os.environ
    # a value read from a mounted secret file may end in a newline: never part of a key
    key = env.get("AWS_ACCESS_KEY_ID", "").strip()
    secret = env.get("AWS_SECRET_ACCESS_KEY", "").strip()
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or ""
    if endpoint_url and not region:
        region = "us-east-1"  # MinIO and emulators take any region; boto3 signs with this one
    if not (key and secret):
        return (
            "it signs with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY from the "
            "environment, and they are not both set"
        )
    if not region:
        return "it needs the bucket's region in AWS_REGION (or AWS_DEFAULT_REGION)"
    if env.get("AWS_PROFILE"):
        return "AWS_PROFILE is set, and only boto3 reads profiles"
    if _truthy(env.get("AWS_USE_FIPS_ENDPOINT")) or _truthy(env.get("AWS_USE_DUALSTACK_ENDPOINT")):
        return (
            "FIPS and dual-stack endpoints (AWS_USE_FIPS_ENDPOINT, "
            "AWS_USE_DUALSTACK_ENDPOINT) are boto3's"
        )
    if http_client.proxied(endpoint_url):
        return "a proxy variable applies to the endpoint, and it does not speak to proxies"
    return Credentials(key, secret, env.get("AWS_SESSION_TOKEN", "").strip()), region


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


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


def signed_headers(
    method: str,
    host: str,
    path: str,
    query: dict[str, str],
    headers: dict[str, str],
    creds: Credentials,
    region: str,
    now: datetime,
) -> dict[str, str]:
    """`headers` plus host, x-amz-* and the SigV4 Authorization for a bodiless request."""
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    out = {**headers, "host": host, "x-amz-date": stamp, "x-amz-content-sha256": EMPTY_SHA256}
    if creds.token:
        out["x-amz-security-token"] = creds.token
    lowered = {name.lower(): " ".join(value.split()) for name, value in out.items()}
    names = sorted(lowered)
    canonical = "\n".join(
        [
            method,
            quote(path, safe="/~"),
            canonical_query(query),
            *(f"{name}:{lowered[name]}" for name in names),
            "",
            ";".join(names),
            EMPTY_SHA256,
        ]
    )
    scope = f"{stamp[:8]}/{region}/s3/aws4_request"
    to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{_sha256(canonical)}"
    key = f"AWS4{creds.secret}".encode()
    for part in (stamp[:8], region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    out["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={creds.key}/{scope}, "
        f"SignedHeaders={';'.join(names)}, Signature={signature}"
    )
    return out


def canonical_query(query: dict[str, str]) -> str:
    pairs = sorted((quote(k, safe="~"), quote(v, safe="~")) for k, v in query.items())
    return "&".join(f"{k}={v}" for k, v in pairs)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def digest(response: http_client.Response) -> checksums.Digest | None:
    """The whole object's digest a GetObject answer names: a full-object x-amz-checksum-*
    (a whole GET with checksum mode; a composite `<b64>-<parts>` is none), else the ETag of a
    single-part upload stored without SSE-KMS or SSE-C (their ETags are no MD5)."""
    found = full_checksum(response)
    if found is not None or not etag_is_md5(response):
        return found
    return checksums.from_hex_md5(response.getheader("ETag", ""), "ETag")


def full_checksum(response: http_client.Response) -> checksums.Digest | None:
    """The full-object x-amz-checksum-* an answer with checksum mode names, best first."""
    for name in CHECKSUMS:
        value = response.getheader(f"x-amz-checksum-{name}", "")
        found = checksums.from_base64(name, value, f"x-amz-checksum-{name}") if value else None
        if found is not None:
            return found
    return None


def etag_is_md5(response: http_client.Response) -> bool:
    """The ETag is an MD5 (of the object, or of its parts' MD5s): not so under SSE-KMS or
    SSE-C."""
    encryption = response.getheader("x-amz-server-side-encryption", "").lower()
    return not (
        encryption.startswith("aws:kms")
        or response.getheader("x-amz-server-side-encryption-customer-algorithm")
    )


def multipart_etag(tag: str) -> int:
    """The number of parts a multipart upload's ETag (`"<md5 of the parts' MD5s>-<parts>"`)
    names; 0 for any other ETag."""
    found = _MULTIPART_ETAG.fullmatch(tag.strip().strip('"'))
    return int(found.group(1)) if found else 0


def parts_md5(md5s: list[bytes]) -> str:
    """The ETag S3 gives a multipart upload of parts with these MD5s (quotes aside)."""
    return f"{hashlib.md5(b''.join(md5s), usedforsecurity=False).hexdigest()}-{len(md5s)}"


class S3RestBackend:
    """One bucket through S3's REST API; core.storage.backend's Backend."""

    scheme = "s3"

    def __init__(
        self, bucket: str, endpoint_url: str | None, creds: Credentials, region: str
    ) -> None:
        self.bucket = bucket
        self._endpoint_url = endpoint_url
        self._creds = creds
        self._site = (region, target(bucket, endpoint_url, region))
        self._lock = threading.Lock()
        self._connections = http_client.Connections("AWS_CA_BUNDLE")

    def list_objects(self, prefix: str) -> Iterator[RemoteObject]:
        query = {"list-type": "2", "prefix": prefix, "encoding-type": "url"}
        while True:
            body = self._call("", query, {}, f"list {self._url(prefix)}", http_client.read)
            root = http_client.parse_xml(body)
            # encoding-type=url: S3 writes a space as '+' and a '+' as %2B; keys are decoded
            # only when the answer says it encoded them (as botocore reads): a server that
            # ignored the parameter sent them as they are
            encoded = http_client.text(root, "EncodingType").lower() == "url"
            for item in root.iter("Contents"):
                key = http_client.text(item, "Key")
                yield RemoteObject(
                    unquote_plus(key) if encoded else key,
                    int(http_client.text(item, "Size")),
                    http_client.text(item, "ETag"),
                )
            token = http_client.text(root, "NextContinuationToken")
            if http_client.text(root, "IsTruncated") != "true" or not token:
                return
            query["continuation-token"] = token

    def read(self, key: str) -> bytes:
        return self._call(key, {}, {}, f"read {self._url(key)}", http_client.read)

    def download(self, obj: RemoteObject, dest: Path) -> None:
        what = f"download {self._url(obj.key)}"
        http_client.download(
            obj,
            dest,
            f"Cannot {what}",
            lambda headers, use: self._call(obj.key, {}, headers, what, use),
            digest=digest,
            whole=CHECKSUM_MODE,
            ranges=self._ranges(obj, what),
        )

    def _ranges(self, obj: RemoteObject, what: str) -> http_client.Ranges:
        """How a big object's ranges are checked. A ranged GetObject names no checksum, so:
        an upload in parts of the ranges' size has the MD5 of its parts' MD5s as its ETag
        (each range's MD5 computed as it arrives, in its worker); any other object's
        full-object CRC comes from a HEAD beside the ranges, where it has one."""
        parts = multipart_etag(obj.tag)
        if parts and parts == -(-obj.size // http_client.PART_BYTES):

            def whole(md5s: list[bytes], first: http_client.Response) -> str | None:
                return self._etag_problem(obj, md5s, first, what)

            return http_client.Ranges(md5=True, whole=whole)
        return http_client.Ranges(named=lambda: self._head_checksum(obj, what))

    def _head_checksum(self, obj: RemoteObject, what: str) -> checksums.Digest | None:
        headers = {**CHECKSUM_MODE, "If-Match": obj.tag}
        return self._call(obj.key, {}, headers, what, _headed(full_checksum), "HEAD")

    def _etag_problem(
        self, obj: RemoteObject, md5s: list[bytes], first: http_client.Response, what: str
    ) -> str | None:
        """'' when the ranges' MD5s make the multipart ETag; else the words of the error,
        once a HEAD of each part confirmed the parts are the ranges (None: they are not, or
        the endpoint cannot tell: then the ETag says nothing of these bytes)."""
        want = obj.tag.strip().strip('"').lower()
        got = parts_md5(md5s)
        if got == want:
            return ""
        if not etag_is_md5(first) or not self._parts_are_ranges(obj, len(md5s), what):
            return None
        return (
            "the downloaded bytes do not match the object's MD5 (multipart ETag, of its "
            f"{len(md5s)} parts' MD5s): got {got}, expected {want}"
        )

    def _parts_are_ranges(self, obj: RemoteObject, parts: int, what: str) -> bool:
        for number in range(1, parts + 1):
            size = min(http_client.PART_BYTES, obj.size - (number - 1) * http_client.PART_BYTES)
            query = {"partNumber": str(number)}
            try:
                length = self._call(obj.key, query, {}, what, _headed(_length), "HEAD")
            except StorageError as exc:
                log.debug("%s: the parts' sizes are unknown: %s", what, exc)
                return False
            if length != size:
                log.debug("%s: not verified: uploaded in parts of other sizes", what)
                return False
        return True

    def _url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def _call(
        self,
        key: str,
        query: dict[str, str],
        headers: dict[str, str],
        what: str,
        use: Callable[[http_client.Response], T],
        method: str = "GET",
    ) -> T:
        """GET (or HEAD) the key, retrying what boto3 retries; `use(response)` reads a 2xx
        response."""

        def fail(exc: http_client.Failure) -> StorageError:
            return StorageError(f"Cannot {what}: {describe(exc.code, exc.message, self.bucket)}")

        return http_client.retrying(
            lambda: self._once(key, query, headers, use, method),
            fail,
            f"Cannot {what}: cannot reach the S3 endpoint",
            self._redirect,
        )

    def _once(
        self,
        key: str,
        query: dict[str, str],
        headers: dict[str, str],
        use: Callable[[http_client.Response], T],
        method: str,
    ) -> T:
        region, site = self._site
        path = f"{site.base}/{key}"
        signed = signed_headers(
            method, site.host, path, query, headers, self._creds, region, datetime.now(UTC)
        )
        url = quote(path, safe="/~") + (f"?{canonical_query(query)}" if query else "")
        return self._connections.get(site.origin, url, signed, _failure, use, method)

    def _redirect(self, exc: http_client.Failure) -> bool:
        """The bucket lives in the region the failure names: requests go there from now."""
        region = exc.region if isinstance(exc, Failure) else ""
        if not region:
            return False
        with self._lock:  # another thread may have moved already: then this one goes again
            if region != self._site[0]:
                self._site = (region, target(self.bucket, self._endpoint_url, region))
        return True


def _headed(read: Callable[[http_client.Response], T]) -> Callable[[http_client.Response], T]:
    """`read` of a HEAD's answer, whose empty body is read to its end (so the connection is
    kept)."""

    def use(response: http_client.Response) -> T:
        response.read()
        return read(response)

    return use


def _length(response: http_client.Response) -> int:
    return int(response.getheader("Content-Length", "-1"))


def _failure(response: http.client.HTTPResponse, body: bytes) -> Failure:
    code, message = str(response.status), response.reason
    region = response.getheader("x-amz-bucket-region", "")
    try:
        root = http_client.parse_xml(body)
        code = http_client.text(root, "Code") or code
        message = http_client.text(root, "Message") or message
        region = region or http_client.text(root, "Region")
    except ElementTree.ParseError:
        pass
    moved = response.status in (301, 307, 400) and region
    return Failure(response.status, code, message, region if moved else "")
