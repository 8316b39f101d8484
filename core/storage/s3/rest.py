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
_MULTIPART_ETAG = re.compile(r"([0-9a-fA-F]{32})-([0-9]{1,5})")
_PARTS = re.compile(r"[0-9]{1,5}")
# Full-object checksums GetObject names with x-amz-checksum-mode: ENABLED, best first (those
# with a fast hasher here; CRC64NVME has none in the standard library)
CHECKSUMS = ("crc32", "crc32c", "sha256", "sha1")
CHECKSUM_MODE = {"x-amz-checksum-mode": "ENABLED"}
# what a big object's whole digest is hashed with in order (the MD5 of a single-part upload
# when it has no checksum: its only digest)
IN_ORDER = frozenset({*CHECKSUMS, "md5"})


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
    """The whole object's digest a GetObject (or HeadObject) answer names: a full-object
    x-amz-checksum-* (with checksum mode; a composite `<b64>-<parts>` is none), else the ETag
    of a single-part upload stored without SSE-KMS or SSE-C (their ETags are no MD5)."""
    return whole_digest(response.msg)


def whole_digest(headers: http_client.Headers) -> checksums.Digest | None:
    found = full_checksum(headers)
    if found is not None or not etag_is_md5(headers):
        return found
    return checksums.from_hex_md5(headers.get("ETag", ""), "ETag")


def full_checksum(headers: http_client.Headers) -> checksums.Digest | None:
    """The full-object x-amz-checksum-* an answer with checksum mode names, best first (none
    of type COMPOSITE, nor a composite's `<b64>-<parts>`)."""
    if headers.get("x-amz-checksum-type", "").upper() == "COMPOSITE":
        return None
    for name in CHECKSUMS:
        value = headers.get(f"x-amz-checksum-{name}", "")
        found = checksums.from_base64(name, value, f"x-amz-checksum-{name}") if value else None
        if found is not None:
            return found
    return None


def maybe_composite(headers: http_client.Headers) -> bool:
    """The answer's checksum may be a composite one named without its `-<parts>` and type
    (moto's HEAD does so): of a multipart upload, of no stated type."""
    return not headers.get("x-amz-checksum-type") and bool(etag_parts(headers))


def etag_parts(headers: http_client.Headers) -> int:
    return tag_parts(headers.get("ETag", ""))


def tag_parts(tag: str) -> int:
    """The number of parts a multipart upload's ETag (`"<hex>-<parts>"`) names; else 0."""
    found = _MULTIPART_ETAG.fullmatch(tag.strip().strip('"'))
    return int(found.group(2)) if found else 0


def etag_is_md5(headers: http_client.Headers) -> bool:
    """The ETag is an MD5 (of the object, or of its parts' MD5s): not so under SSE-KMS or
    SSE-C."""
    encryption = headers.get("x-amz-server-side-encryption", "").lower()
    return not (
        encryption.startswith("aws:kms")
        or headers.get("x-amz-server-side-encryption-customer-algorithm")
    )


@dataclass(frozen=True)
class PartsDigest:
    """A digest made of an upload's `parts` parts' digests, all of `algorithm`: a composite
    checksum (`<b64>-<parts>`: the checksum of the parts' raw checksums one after another) or
    a multipart ETag (`<hex>-<parts>`: the MD5 of the parts' MD5s)."""

    algorithm: str
    want: bytes
    parts: int
    source: str

    def made(self, digests: list[bytes]) -> bytes:
        hasher = checksums.new_hasher(self.algorithm)
        assert hasher is not None  # parts_digest names only algorithms at hand
        hasher.update(b"".join(digests))
        return hasher.digest()


def parts_digest(headers: http_client.Headers, parts: int) -> PartsDigest | None:
    """The digest of an upload in `parts` parts the answer names: a composite checksum (its
    parts' CRCs cost little), else, with no full-object checksum, the multipart ETag; None
    for an upload in another number of parts."""
    if headers.get("x-amz-checksum-type", "").upper() != "FULL_OBJECT":
        for name in CHECKSUMS:
            value, dash, count = headers.get(f"x-amz-checksum-{name}", "").partition("-")
            named = int(count) if dash and _PARTS.fullmatch(count) else etag_parts(headers)
            found = checksums.from_base64(name, value, "") if named == parts else None
            if found is not None:
                source = f"composite x-amz-checksum-{name}, of its {parts} parts'"
                return PartsDigest(name, found.want, parts, source)
    if full_checksum(headers) is not None or not etag_is_md5(headers):
        return None
    etag = _MULTIPART_ETAG.fullmatch(headers.get("ETag", "").strip().strip('"'))
    if etag is None or int(etag.group(2)) != parts:
        return None
    source = f"multipart ETag, the MD5 of its {parts} parts' MD5s"
    return PartsDigest("md5", bytes.fromhex(etag.group(1)), parts, source)


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
        """A ranged GetObject names no checksum: a HEAD beside the ranges does. A full-object
        checksum, or the ETag (an MD5) of a single-part upload, is hashed in order; a digest
        made of the parts' (a composite checksum, else a multipart ETag) when the upload's
        parts are the ranges (as many as the ranges, as boto3 and the AWS CLI upload), each
        range hashed in its worker as it arrives."""
        count = -(-obj.size // http_client.PART_BYTES)

        def hashes(head: http_client.Headers) -> frozenset[str]:
            made = parts_digest(head, count)
            return frozenset({made.algorithm}) if made is not None else frozenset()

        def whole(digests: list[dict[str, bytes]], head: http_client.Headers) -> str | None:
            made = parts_digest(head, count)
            return self._parts_problem(obj, made, digests, what) if made is not None else None

        return http_client.Ranges(
            side=lambda: self._head(obj, {}, what),
            hashes=hashes if tag_parts(obj.tag) == count else None,
            whole=whole,
            named=lambda head: whole_digest(head) if head.get("ETag") else None,
            tentative=maybe_composite,
            in_order=IN_ORDER,
        )

    def _head(self, obj: RemoteObject, query: dict[str, str], what: str) -> http_client.Headers:
        headers = {**CHECKSUM_MODE, "If-Match": obj.tag}
        return self._call(obj.key, query, headers, what, _headers, "HEAD")

    def _parts_problem(
        self, obj: RemoteObject, made: PartsDigest, digests: list[dict[str, bytes]], what: str
    ) -> str | None:
        """'' when the ranges' digests make the parts' digest; else the words of the error,
        once a HEAD of each part confirmed the parts are the ranges (None: they are not, or
        the endpoint cannot tell: then the digest says nothing of these bytes)."""
        got = made.made([d[made.algorithm] for d in digests])
        if got == made.want:
            return ""
        if not self._parts_are_ranges(obj, made.parts, what):
            return None
        return checksums.Digest(made.algorithm, made.want, made.source).mismatch(got)

    def _parts_are_ranges(self, obj: RemoteObject, parts: int, what: str) -> bool:
        for number in range(1, parts + 1):
            size = min(http_client.PART_BYTES, obj.size - (number - 1) * http_client.PART_BYTES)
            try:
                head = self._head(obj, {"partNumber": str(number)}, what)
            except StorageError as exc:
                log.debug("%s: the parts' sizes are unknown: %s", what, exc)
                return False
            if head.get("Content-Length") != str(size):
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


def _headers(response: http_client.Response) -> http_client.Headers:
    """A HEAD's answer: its headers, its empty body read (so the connection is kept)."""
    response.read()
    return response.msg


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
