"""S3's REST API over http.client, signed with Signature V4: a fresh instance reads its bucket
without boto3, whose import and first client cost ~200 ms of a cold start (more than a
ResNet-50 compile).

It serves a set-up where the environment holds the credentials and the region, as on Lambda
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION), with no profile,
proxy, FIPS or dual-stack setting (from_environment says why not otherwise). It makes
three calls: ListObjectsV2, GetObject, and ranged GetObjects (If-Match the listed ETag) for big
files, with the timeouts, retries and error texts of the boto3 path. A bucket in another
region than AWS_REGION is followed once, from the region S3's redirect or error names.
The signing is signing.py; the checksums S3's answers name are read in checksums.py.
"""

from __future__ import annotations

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

from core.storage import checksums, download, http_client
from core.storage.backend import RemoteObject
from core.storage.download import Ranges
from core.storage.s3 import describe
from core.storage.s3.checksums import (
    CHECKSUM_MODE,
    IN_ORDER,
    PartsDigest,
    digest,
    maybe_composite,
    parts_digest,
    tag_parts,
    whole_digest,
)
from core.storage.s3.signing import Credentials, canonical_query, signed_headers
from core.storage.secrets import StorageError

log = logging.getLogger("ov_serverless.storage")

T = TypeVar("T")
_DNS_LABEL = re.compile(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]")


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
            with http_client.listing(f"Cannot list {self._url(prefix)}"):
                root = http_client.parse_xml(body)
                page = _objects(root)
            yield from page
            token = http_client.text(root, "NextContinuationToken")
            if http_client.text(root, "IsTruncated") != "true" or not token:
                return
            query["continuation-token"] = token

    def read(self, key: str) -> bytes:
        return self._call(key, {}, {}, f"read {self._url(key)}", http_client.read)

    def download(self, obj: RemoteObject, dest: Path) -> None:
        what = f"download {self._url(obj.key)}"
        download.download(
            obj,
            dest,
            f"Cannot {what}",
            lambda headers, use: self._call(obj.key, {}, headers, what, use),
            digest=digest,
            whole=CHECKSUM_MODE,
            ranges=self._ranges(obj, what),
        )

    def _ranges(self, obj: RemoteObject, what: str) -> Ranges:
        """A ranged GetObject names no checksum: a HEAD beside the ranges does. A full-object
        checksum, or the ETag (an MD5) of a single-part upload, is hashed in order; a digest
        made of the parts' (a composite checksum, else a multipart ETag) when the upload's
        parts are the ranges (as many as the ranges, as boto3 and the AWS CLI upload), each
        range hashed in its worker as it arrives."""
        count = -(-obj.size // download.PART_BYTES)

        def hashes(head: http_client.Headers) -> frozenset[str]:
            made = parts_digest(head, count)
            return frozenset({made.algorithm}) if made is not None else frozenset()

        def whole(digests: list[dict[str, bytes]], head: http_client.Headers) -> str | None:
            made = parts_digest(head, count)
            return self._parts_problem(obj, made, digests, what) if made is not None else None

        return Ranges(
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
            size = min(download.PART_BYTES, obj.size - (number - 1) * download.PART_BYTES)
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


def _objects(root: ElementTree.Element) -> list[RemoteObject]:
    """The objects of one ListObjectsV2 page. encoding-type=url: S3 writes a space as '+' and
    a '+' as %2B; keys are decoded only when the answer says it encoded them (as botocore
    reads): a server that ignored the parameter sent them as they are."""
    encoded = http_client.text(root, "EncodingType").lower() == "url"
    objects = []
    for item in root.iter("Contents"):
        key = http_client.text(item, "Key")
        objects.append(
            RemoteObject(
                unquote_plus(key) if encoded else key,
                int(http_client.text(item, "Size")),
                http_client.text(item, "ETag"),
            )
        )
    return objects


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
