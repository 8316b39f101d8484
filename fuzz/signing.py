"""Fuzzed comparison of the REST clients' request signing with the SDKs they stand in for:
core.storage.s3.signing.signed_headers (SigV4) with botocore's S3SigV4Auth, and
core.storage.azure.rest.authorization (Shared Key) with azure-storage-blob's
SharedKeyCredentialPolicy, on the requests the clients send (listings with prefixes and
continuation tokens, whole and ranged GETs of keys with unicode and reserved characters, with
and without a session token).

    python fuzz/signing.py [COUNT] [SEED]    # COUNT random requests per client, seeded

tests/core/storage/test_signing.py runs `mismatches` in the suite.
"""

from __future__ import annotations

import base64
import random
import string
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.storage.azure import rest as azure_rest  # noqa: E402
from core.storage.s3 import checksums as s3_checksums  # noqa: E402
from core.storage.s3 import rest as s3_rest  # noqa: E402
from core.storage.s3 import signing as s3_signing  # noqa: E402

# characters a key or token may hold: reserved, unicode, and what encoders get wrong
ODD = " +%=&?#;:@$,!*'()[]~/\\\"<>^`{|}é日本𝄞\u00a0\u200b"
NAME = string.ascii_letters + string.digits + "-_." + ODD
TOKEN = string.ascii_letters + string.digits + "+/=-_%"
REGIONS = ("us-east-1", "eu-west-1", "ap-southeast-2", "cn-north-1", "us-gov-west-1")


def _text(rng: random.Random, alphabet: str, low: int, high: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(low, high)))


def _key(rng: random.Random) -> str:
    return "/".join(_text(rng, NAME, 1, 12) for _ in range(rng.randint(1, 4)))


def _range(rng: random.Random) -> str:
    start = rng.randint(0, 1 << 40)
    return f"bytes={start}-{start + rng.randint(0, 1 << 24)}"


def s3_request(rng: random.Random) -> dict[str, Any]:
    """One request as S3RestBackend sends it: a listing page, a whole or ranged GET, or the
    HEAD (of the object or of one part) beside a big object's ranges."""
    bucket = rng.choice(("models", "my.models", "Old_Bucket", "b-" + _text(rng, "abc123", 1, 8)))
    region = rng.choice(REGIONS)
    site = s3_rest.target(bucket, rng.choice((None, "http://127.0.0.1:9000")), region)
    query: dict[str, str] = {}
    headers: dict[str, str] = {}
    method = "GET"
    if rng.random() < 0.4:
        query = {"list-type": "2", "prefix": _key(rng) + "/", "encoding-type": "url"}
        if rng.random() < 0.5:
            query["continuation-token"] = _text(rng, TOKEN, 1, 80)
        path = f"{site.base}/"
    else:
        path = f"{site.base}/{_key(rng)}"
        tag = _text(rng, "0123456789abcdef", 32, 32)
        kind = rng.random()
        if kind < 0.4:
            headers = {"Range": _range(rng), "If-Match": f'"{tag}"'}
        elif kind < 0.7:
            headers = dict(s3_checksums.CHECKSUM_MODE)
        else:
            method, headers = "HEAD", {**s3_checksums.CHECKSUM_MODE, "If-Match": f'"{tag}-3"'}
            if rng.random() < 0.5:
                query = {"partNumber": str(rng.randint(1, 10000))}
    token = _text(rng, TOKEN, 20, 300) if rng.random() < 0.5 else ""
    creds = s3_signing.Credentials(
        "AKIA" + _text(rng, string.ascii_uppercase, 16, 16), _text(rng, TOKEN, 40, 40), token
    )
    now = datetime(
        2020 + rng.randint(0, 10),
        rng.randint(1, 12),
        rng.randint(1, 28),
        rng.randint(0, 23),
        rng.randint(0, 59),
        rng.randint(0, 59),
        tzinfo=UTC,
    )
    return {
        "method": method,
        "host": site.host,
        "path": path,
        "query": query,
        "headers": headers,
        "creds": creds,
        "region": region,
        "now": now,
    }


def s3_signatures(request: dict[str, Any]) -> tuple[str, str]:
    """(ours, botocore's) Authorization for one s3_request."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    ours = s3_signing.signed_headers(
        request["method"],
        request["host"],
        request["path"],
        request["query"],
        request["headers"],
        request["creds"],
        request["region"],
        request["now"],
    )
    creds = request["creds"]
    theirs = AWSRequest(
        method=request["method"],
        url=f"http://{request['host']}{quote(request['path'], safe='/~')}",
        headers=dict(request["headers"]),
        params=dict(request["query"]),
    )
    signer = S3SigV4Auth(
        Credentials(creds.key, creds.secret, creds.token or None), "s3", request["region"]
    )
    with mock.patch("botocore.auth.get_current_datetime", return_value=request["now"]):
        signer.add_auth(theirs)
    return ours["Authorization"], str(theirs.headers["Authorization"])


def azure_request(rng: random.Random) -> dict[str, Any]:
    """One request as AzureRestBackend sends it with an account key."""
    account = azure_rest.Account(
        "http://127.0.0.1:10000/devstoreaccount1",
        rng.choice(("devstoreaccount1", "acct" + _text(rng, "ab1", 1, 8))),
        base64.b64encode(rng.randbytes(64)).decode(),
    )
    container = rng.choice(("models", "c-" + _text(rng, "abc123", 1, 10)))
    query: dict[str, str] = {}
    headers: dict[str, str] = {}
    key = ""
    if rng.random() < 0.4:
        query = {"restype": "container", "comp": "list", "maxresults": "5000"}
        if rng.random() < 0.7:
            query["prefix"] = _key(rng) + "/"
        if rng.random() < 0.5:
            query["marker"] = _text(rng, TOKEN, 1, 120)
    else:
        key = _key(rng)
        if rng.random() < 0.5:
            headers = azure_rest.ranged({"Range": _range(rng), "If-Match": '"0x8DC0123456789AB"'})
            if rng.random() < 0.5:  # a range of a blob without Content-MD5
                headers.update(azure_rest.RANGE_MD5.headers)
    return {
        "account": account,
        "container": container,
        "key": key,
        "query": query,
        "headers": headers,
        "date": "Mon, 07 Dec 2026 02:04:04 GMT",
    }


def azure_signatures(request: dict[str, Any]) -> tuple[str, str]:
    """(ours, azure-storage-blob's) Authorization for one azure_request."""
    from azure.core.pipeline import PipelineContext, PipelineRequest
    from azure.core.pipeline.transport import HttpRequest
    from azure.storage.blob._shared.authentication import SharedKeyCredentialPolicy

    account = request["account"]
    path = azure_rest.request_path(account, request["container"], request["key"])
    headers = {
        **request["headers"],
        "x-ms-date": request["date"],
        "x-ms-version": azure_rest.API_VERSION,
    }
    ours = azure_rest.authorization(account, path, request["query"], headers)
    url = f"http://127.0.0.1:10000{path}"
    query = azure_rest.encode_query(request["query"])
    theirs = HttpRequest("GET", url + (f"?{query}" if query else ""), headers=dict(headers))
    SharedKeyCredentialPolicy(account.name, account.key).on_request(
        PipelineRequest(theirs, PipelineContext(None))
    )
    return ours, str(theirs.headers["Authorization"])


CLIENTS: dict[
    str,
    tuple[Callable[[random.Random], dict[str, Any]], Callable[[dict[str, Any]], tuple[str, str]]],
] = {
    "s3": (s3_request, s3_signatures),
    "azure": (azure_request, azure_signatures),
}


def mismatches(client: str, count: int, seed: int) -> Iterator[dict[str, Any]]:
    """The requests among `count` seeded random ones whose two signatures differ."""
    make, sign = CLIENTS[client]
    rng = random.Random(seed)
    for _ in range(count):
        request = make(rng)
        ours, theirs = sign(request)
        if ours != theirs:
            yield {**request, "ours": ours, "theirs": theirs}


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else random.randrange(1 << 30)
    failed = False
    for client in CLIENTS:
        bad = list(mismatches(client, count, seed))
        print(f"{client}: {count - len(bad)}/{count} signatures match the SDK's (seed {seed})")
        for request in bad[:3]:
            print("  ", request)
        failed |= bool(bad)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
