"""Azure Blob Storage's REST API over http.client: a fresh instance reads its container
without azure-storage-blob, whose import and first client (320-350 ms in bench/) come before every
cold start's download.

It serves a connection string (account key, SAS or none, as the SDK reads it) or an account
URL carrying a SAS token, with no proxy; a managed identity (azure-identity) is the SDK's
(from_environment says why not). It makes two calls: List Blobs and Get Blob (ranged,
If-Match the listed ETag, for big files), with the retries and error texts of the SDK path.
Requests are signed with Shared Key as the SDK signs them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote, unquote, urlsplit
from xml.etree import ElementTree

from core.storage import checksums, download, http_client
from core.storage.azure import describe
from core.storage.backend import RemoteObject
from core.storage.secrets import StorageError

API_VERSION = "2025-11-05"
DEV_ACCOUNT = "devstoreaccount1"  # Azurite's well-known account (UseDevelopmentStorage=true)
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
PAGE_SIZE = 5000  # List Blobs' most per page
MALFORMED = "Connection string is either blank or malformed."
_SIGNED = (
    "content-encoding",
    "content-language",
    "content-length",
    "content-md5",
    "content-type",
    "date",
    "if-modified-since",
    "if-match",
    "if-none-match",
    "if-unmodified-since",
    "range",
)
T = TypeVar("T")


@dataclass(frozen=True)
class Account:
    """Where a storage account's blobs are and how requests prove access: a Shared Key
    (`name`, `key`), a SAS token (`sas`), or neither (public containers)."""

    endpoint: str  # scheme://host[:port][/path], no trailing '/'
    name: str = ""
    key: str = ""
    sas: str = ""


class Failure(http_client.Failure):
    retry_codes = frozenset({"OperationTimedOut", "InternalError", "ServerBusy"})

    @property
    def retryable(self) -> bool:
        return self.status not in (501, 505) and (self.status >= 500 or super().retryable)


def from_environment(connection_string: str | None, account_url: str | None) -> Account | str:
    """The account this client reads, from a connection string or a SAS account URL; or why
    it cannot serve the set-up as the SDK would."""
    # a value read from a mounted secret file may end in a newline: never part of it
    connection_string, account_url = (connection_string or "").strip(), (account_url or "").strip()
    if connection_string:
        account = from_connection_string(connection_string)
    elif account_url and "?" in account_url:
        url, _, sas = account_url.partition("?")
        account = Account(url.rstrip("/"), sas=sas)
    else:  # a token credential (DefaultAzureCredential) is the SDK's
        return (
            "it reads with AZURE_STORAGE_CONNECTION_STRING or an account URL carrying a "
            "SAS token, and neither is set (a managed identity is read by the SDK only)"
        )
    if http_client.proxied(account.endpoint):
        return "a proxy variable applies to the endpoint, and it does not speak to proxies"
    return account


def from_connection_string(text: str) -> Account:
    """The account of a connection string, read as azure-storage-blob reads it."""
    pairs = [item.split("=", 1) for item in text.rstrip(";").split(";")]
    if any(len(pair) != 2 for pair in pairs):
        raise StorageError(f"Invalid AZURE_STORAGE_CONNECTION_STRING: {MALFORMED}")
    settings = {name.strip().upper(): value.strip() for name, value in pairs}
    if settings.get("USEDEVELOPMENTSTORAGE") == "true":
        return Account(f"http://127.0.0.1:10000/{DEV_ACCOUNT}", DEV_ACCOUNT, DEV_KEY)
    name = settings.get("ACCOUNTNAME", "")
    endpoint = settings.get("BLOBENDPOINT", "")
    if not endpoint and name:
        scheme = settings.get("DEFAULTENDPOINTSPROTOCOL", "https")
        endpoint = f"{scheme}://{name}.blob.{settings.get('ENDPOINTSUFFIX', 'core.windows.net')}"
    if not endpoint:
        raise StorageError(
            "Invalid AZURE_STORAGE_CONNECTION_STRING: "
            "Connection string missing required connection details."
        )
    key = settings.get("ACCOUNTKEY", "") if name else ""
    sas = "" if key else settings.get("SHAREDACCESSSIGNATURE", "").lstrip("?")
    return Account(endpoint.rstrip("/"), name, key, sas)


def authorization(
    account: Account, path: str, query: dict[str, str], headers: dict[str, str]
) -> str:
    """Shared Key for a GET of `path` (as sent, percent-encoded) with `query` (decoded) and
    `headers`, which hold every x-ms-* header the request sends."""
    lowered = {name.lower(): value for name, value in headers.items() if value}
    ms = sorted((name, value) for name, value in lowered.items() if name.startswith("x-ms-"))
    resource = f"/{account.name}{path}" + "".join(
        f"\n{name.lower()}:{value}" for name, value in sorted(query.items())
    )
    to_sign = "\n".join(
        [
            "GET",
            *(lowered.get(name, "") for name in _SIGNED),
            *(f"{name}:{value}" for name, value in ms),
            resource,
        ]
    )
    digest = hmac.new(base64.b64decode(account.key), to_sign.encode(), hashlib.sha256).digest()
    return f"SharedKey {account.name}:{base64.b64encode(digest).decode()}"


class AzureRestBackend:
    """One container through Blob Storage's REST API; core.storage.backend's Backend."""

    scheme = "az"

    def __init__(self, container: str, account: Account) -> None:
        self.bucket = container
        self._account = account
        parts = urlsplit(account.endpoint)
        self._origin = f"{parts.scheme}://{parts.netloc}"
        self._connections = http_client.Connections("REQUESTS_CA_BUNDLE")

    def list_objects(self, prefix: str) -> Iterator[RemoteObject]:
        query = {"restype": "container", "comp": "list", "maxresults": str(PAGE_SIZE)}
        if prefix:
            query["prefix"] = prefix
        while True:
            what = f"Cannot list {self._url(prefix)}"
            body = self._call("", query, {}, what, http_client.read)
            with http_client.listing(what):
                root = http_client.parse_xml(body)
                page = [_blob(blob) for blob in root.iter("Blob")]
            yield from page
            marker = http_client.text(root, "NextMarker")
            if not marker:
                return
            query["marker"] = marker

    def read(self, key: str) -> bytes:
        return self._call(key, {}, {}, f"Cannot read {self._url(key)}", http_client.read)

    def download(self, obj: RemoteObject, dest: Path) -> None:
        what = f"Cannot download {self._url(obj.key)}"

        def digest(response: http_client.Response) -> checksums.Digest | None:
            """The blob's Content-MD5 where it has one: in every answer's x-ms-blob-content-md5
            (Content-MD5 of a whole GET), else as listed."""
            for name in ("x-ms-blob-content-md5", "Content-MD5"):
                value = response.getheader(name, "")
                if value and (response.status == 200 or name != "Content-MD5"):
                    return checksums.from_base64("md5", value, name)
            return checksums.from_base64("md5", obj.hashes, "listing")

        download.download(
            obj,
            dest,
            what,
            lambda headers, use: self._call(obj.key, {}, ranged(headers), what, use),
            digest=digest,
            ranges=WHOLE_MD5 if obj.hashes else RANGE_MD5,
        )

    def _url(self, key: str) -> str:
        return f"az://{self.bucket}/{key}"

    def _call(
        self,
        key: str,
        query: dict[str, str],
        headers: dict[str, str],
        what: str,
        use: Callable[[http_client.Response], T],
    ) -> T:
        def fail(exc: http_client.Failure) -> StorageError:
            return StorageError(f"{what}: {self._describe(exc)}")

        return http_client.retrying(
            lambda: self._once(key, query, headers, use),
            fail,
            f"{what}: cannot reach Azure Blob Storage",
        )

    def _once(
        self,
        key: str,
        query: dict[str, str],
        headers: dict[str, str],
        use: Callable[[http_client.Response], T],
    ) -> T:
        path = request_path(self._account, self.bucket, key)
        sent = {**headers, "x-ms-date": formatdate(usegmt=True), "x-ms-version": API_VERSION}
        if self._account.key:
            sent["Authorization"] = authorization(self._account, path, query, sent)
        params = "&".join(part for part in (encode_query(query), self._account.sas) if part)
        url = path + (f"?{params}" if params else "")
        return self._connections.get(self._origin, url, sent, _failure, use)

    def _describe(self, exc: http_client.Failure) -> str:
        """The cause in the words of the SDK client."""
        return describe(exc.status, exc.code, exc.message, self.bucket)


def range_md5_problem(response: http_client.Response, digests: dict[str, bytes]) -> str | None:
    """A range's bytes against the Content-MD5 Blob Storage computed for it (asked with
    x-ms-range-get-content-md5); None when the answer names none."""
    value = response.getheader("Content-MD5", "")
    want = checksums.from_base64("md5", value, "Content-MD5 of the range") if value else None
    return want.mismatch(digests["md5"]) if want is not None else None


# A big blob with a Content-MD5 is read in PART_BYTES ranges and its MD5 computed in order,
# each range once it is in. One without is read in ranges of 4 MiB (the SDK's chunk, and the
# most Blob Storage gives an MD5 of), each checked against the MD5 the service gives of it.
WHOLE_MD5 = download.Ranges(in_order=checksums.FAST | {"md5"})
RANGE_MD5 = download.Ranges(
    size=4 << 20,
    headers={"x-ms-range-get-content-md5": "true"},
    hashes=lambda _: frozenset({"md5"}),
    part=range_md5_problem,
)


def _blob(blob: ElementTree.Element) -> RemoteObject:
    return RemoteObject(
        _name(blob),
        int(http_client.text(blob, "Properties/Content-Length") or 0),
        http_client.text(blob, "Properties/Etag"),
        http_client.text(blob, "Properties/Content-MD5"),
    )


def _name(blob: ElementTree.Element) -> str:
    name = blob.find("Name")
    if name is None:
        return ""
    if name.get("Encoded") == "true":  # a name XML cannot hold comes percent-encoded
        return unquote(name.text or "")
    return name.text or ""


def request_path(account: Account, container: str, key: str) -> str:
    """The path a request for `key` (or the container, for '') is sent to, percent-encoded."""
    base = f"{urlsplit(account.endpoint).path}/{quote(container, safe='')}"
    return base + (f"/{quote(key, safe='/~')}" if key else "")


def encode_query(query: dict[str, str]) -> str:
    return "&".join(f"{name}={quote(value, safe='')}" for name, value in query.items())


def ranged(headers: dict[str, str]) -> dict[str, str]:
    """A part's headers as Blob Storage takes them and the SDK sends them: the range in
    x-ms-range (signed among the x-ms-* headers, as the SDK signs it), If-Match the ETag in
    quotes (List Blobs gives it bare)."""
    out = {("x-ms-range" if name == "Range" else name): value for name, value in headers.items()}
    tag = out.get("If-Match", "")
    if tag and not tag.startswith('"'):
        out["If-Match"] = f'"{tag}"'
    return out


def _failure(response: http_client.Response, body: bytes) -> Failure:
    code = response.getheader("x-ms-error-code", "") or str(response.status)
    message = response.reason or code
    try:
        root = http_client.parse_xml(body)
        code = http_client.text(root, "Code") or code
        message = http_client.text(root, "Message") or message
    except ElementTree.ParseError:
        pass
    lines = message.strip().splitlines()
    return Failure(response.status, code, lines[0] if lines else code)
