"""The checksums S3's answers name, read for the REST client's checks: a full-object
x-amz-checksum-* (asked with x-amz-checksum-mode), a single-part upload's ETag (an MD5 unless
SSE-KMS or SSE-C), and the digests made of an upload's parts' (a composite checksum
`<b64>-<parts>`, a multipart ETag `<hex>-<parts>`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.storage import checksums, http_client

_MULTIPART_ETAG = re.compile(r"([0-9a-fA-F]{32})-([0-9]{1,5})")
_PARTS = re.compile(r"[0-9]{1,5}")
# Full-object checksums GetObject names with x-amz-checksum-mode: ENABLED, best first (those
# with a fast hasher here; CRC64NVME has none in the standard library)
CHECKSUMS = ("crc32", "crc32c", "sha256", "sha1")
CHECKSUM_MODE = {"x-amz-checksum-mode": "ENABLED"}
# what a big object's whole digest is hashed with in order (the MD5 of a single-part upload
# when it has no checksum: its only digest)
IN_ORDER = frozenset({*CHECKSUMS, "md5"})


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
