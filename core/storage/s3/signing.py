"""Signature V4 for S3's bodiless requests (GET, HEAD, listings); fuzz/signing.py holds it
to botocore's signer.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import quote

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


@dataclass(frozen=True)
class Credentials:
    key: str
    secret: str
    token: str = ""


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
