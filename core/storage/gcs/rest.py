"""Cloud Storage's JSON API over http.client: a fresh Cloud Run instance reads its bucket
without google-cloud-storage, whose import and first client (google-auth's metadata probes
included) come before every cold start's download.

It serves a set-up where the SDK would find no key file and ask the metadata server: a Cloud
Run service, job or function (K_SERVICE, CLOUD_RUN_JOB, FUNCTION_TARGET) or a set
GCE_METADATA_HOST; and the emulator (STORAGE_EMULATOR_HOST, anonymous, as the SDK). A key file
(GOOGLE_APPLICATION_CREDENTIALS, gcloud's ADC file), NO_GCE_CHECK=true, a client certificate
(mTLS), metadata mTLS, a proxy, another universe or any other host are the SDK's
(from_environment says which). K_SERVICE or GCE_METADATA_HOST set off Google makes this client
ask for a metadata server that is not there (the SDK would go on anonymously): unset them, or
OVS_GCS_CLIENT=sdk.
It makes two calls: objects.list and the media download (ranged, pinned to the listed
generation, for big files), with the retries and error texts of the SDK path.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

from core.storage import checksums, download, http_client, secrets
from core.storage.backend import RemoteObject
from core.storage.gcs import not_found
from core.storage.secrets import StorageError

API = "https://storage.googleapis.com"
METADATA_HOST = "metadata.google.internal"
TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"
PAGE_SIZE = 1000  # objects.list's most per page
REFRESH_S = 225  # google-auth renews a token this long before it expires
# Cloud Storage ignores Range for an object it decompresses on the way
GZIP_HINT = (
    ", as Cloud Storage answers for one stored with Content-Encoding: gzip; "
    "store model files without it (gcloud storage cp without -z/-Z)"
)
_ON_GOOGLE = ("K_SERVICE", "CLOUD_RUN_JOB", "FUNCTION_TARGET", "GCE_METADATA_HOST")
_USE_CLIENT_CERT = (
    "GOOGLE_API_USE_CLIENT_CERTIFICATE",
    "CLOUDSDK_CONTEXT_AWARE_USE_CLIENT_CERTIFICATE",
)
_CERT_CONFIG = (
    "GOOGLE_API_CERTIFICATE_CONFIG",
    "CLOUDSDK_CONTEXT_AWARE_CERTIFICATE_CONFIG_FILE_PATH",
)
GKE_CERT_BUNDLE = (
    "/var/run/secrets/workload-spiffe-credentials/x509.credential-bundle.private-key.pem"
)
T = TypeVar("T")


@dataclass(frozen=True)
class Where:
    """The JSON API's origin, and the metadata server (host[:port]) that gives the tokens;
    none for the emulator, which takes anonymous requests."""

    endpoint: str
    metadata: str = ""


def from_environment() -> Where | str:
    """Where this client reads, from the environment; or why it cannot serve the set-up as
    the SDK would."""
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    if emulator:
        where = Where(_origin(emulator))
    else:
        why_not = _why_not_metadata()
        if why_not:
            return why_not
        metadata = (
            os.environ.get("GCE_METADATA_HOST")
            or os.environ.get("GCE_METADATA_ROOT")
            or METADATA_HOST
        )
        where = Where(_origin(os.environ.get("API_ENDPOINT_OVERRIDE") or API), metadata)
    if http_client.proxied(where.endpoint):
        return "a proxy variable applies to the endpoint, and it does not speak to proxies"
    return where


def _why_not_metadata() -> str:
    """'' when google.auth.default() would end at the metadata server, over plain HTTP; else
    what it would use instead."""
    if (
        os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
        or Path(_gcloud_file("application_default_credentials.json")).is_file()
    ):
        return (
            "a key file (GOOGLE_APPLICATION_CREDENTIALS, or gcloud's application default "
            "credentials) is set up, and only the SDK reads key files"
        )
    if os.environ.get("NO_GCE_CHECK") == "true":
        return "NO_GCE_CHECK=true says there is no metadata server to ask for a token"
    if _client_certificate():
        return "a client certificate (mTLS) is set up, and only the SDK sends one"
    if os.environ.get("GCE_METADATA_MTLS_MODE", "none").lower() != "none":
        return "GCE_METADATA_MTLS_MODE asks for metadata mTLS, which only the SDK speaks"
    if os.environ.get("GOOGLE_CLOUD_UNIVERSE_DOMAIN", "googleapis.com") != "googleapis.com":
        return "GOOGLE_CLOUD_UNIVERSE_DOMAIN names another universe, which only the SDK reaches"
    if not any(os.environ.get(name) for name in _ON_GOOGLE):
        return (
            "it reads the emulator (STORAGE_EMULATOR_HOST) or, on Google Cloud, with the "
            "metadata server's token (K_SERVICE, CLOUD_RUN_JOB, FUNCTION_TARGET or "
            "GCE_METADATA_HOST set), and neither is set"
        )
    return ""


def _client_certificate() -> bool:
    """google-auth would send a client certificate: told to, or (untold) finding a certificate
    config or GKE's workload bundle; the SDK then talks mTLS to its own endpoint."""
    told = next((os.environ[name] for name in _USE_CLIENT_CERT if os.environ.get(name)), "")
    if told:
        return told.lower() == "true"
    return (
        any(os.environ.get(name) for name in _CERT_CONFIG)
        or Path(_gcloud_file("certificate_config.json")).is_file()
        or Path(GKE_CERT_BUNDLE).exists()
    )


def _gcloud_file(name: str) -> str:
    config = os.environ.get("CLOUDSDK_CONFIG") or os.path.expanduser("~/.config/gcloud")
    return os.path.join(config, name)


def _origin(url: str) -> str:
    """The SDK takes STORAGE_EMULATOR_HOST with or without its scheme."""
    url = url.rstrip("/")
    return url if "://" in url else f"http://{url}"


class Token:
    """The service account's access token from the metadata server, renewed before expiry;
    one per metadata host, so a warm instance's models share it."""

    _all: dict[str, Token] = {}
    _all_lock = threading.Lock()

    def __init__(self, host: str) -> None:
        self._origin = f"http://{host}"
        self._connections = http_client.Connections("")  # plain HTTP: no CA bundle
        self._lock = threading.Lock()
        self._value, self._renew_at = "", 0.0

    @classmethod
    def of(cls, host: str) -> Token:
        with cls._all_lock:
            if host not in cls._all:
                cls._all[host] = cls(host)
            return cls._all[host]

    def header(self, what: str) -> dict[str, str]:
        with self._lock:
            if time.monotonic() >= self._renew_at:
                self._fetch(what)
            return {"Authorization": f"Bearer {self._value}"}

    def forget(self) -> bool:
        with self._lock:
            self._renew_at = 0.0
        return True

    def _fetch(self, what: str) -> None:
        where = f"{what}: credentials: the metadata server {self._origin}"

        def fail(exc: http_client.Failure) -> StorageError:
            return StorageError(f"{where} answered {exc.status} {exc.message}")

        body = http_client.retrying(
            lambda: self._connections.get(
                self._origin, TOKEN_PATH, {"Metadata-Flavor": "Google"}, _failure, http_client.read
            ),
            fail,
            f"{where} cannot be reached",
        )
        try:
            answer = json.loads(body)
            self._value = str(answer["access_token"])
            secrets.register(self._value)
            lifetime = float(answer.get("expires_in", 3600))
        except (ValueError, KeyError, TypeError) as exc:
            raise StorageError(f"{where} sent no token: {body[:200]!r}") from exc
        self._renew_at = time.monotonic() + lifetime - REFRESH_S


def forget_tokens() -> None:
    """Every token and its expiry clock (core.storage.forget_tokens)."""
    with Token._all_lock:
        Token._all.clear()


class GcsRestBackend:
    """One bucket through Cloud Storage's JSON API; core.storage.backend's Backend."""

    scheme = "gs"

    def __init__(self, bucket: str, where: Where) -> None:
        self.bucket = bucket
        self._origin = where.endpoint
        self._connections = http_client.Connections("REQUESTS_CA_BUNDLE")
        self._token = Token.of(where.metadata) if where.metadata else None
        self._objects = f"/storage/v1/b/{quote(bucket, safe='')}/o"

    def list_objects(self, prefix: str) -> Iterator[RemoteObject]:
        query = {"maxResults": str(PAGE_SIZE), "prettyPrint": "false"}
        if prefix:
            query["prefix"] = prefix
        what = f"Cannot list {self._url(prefix)}"
        while True:
            body = self._call(self._objects, query, {}, what, http_client.read, listing=True)
            with http_client.listing(what):
                page = json.loads(body)
                objects = [_object(item) for item in page.get("items", ())]
                token = page.get("nextPageToken")
            yield from objects
            if not token:
                return
            query["pageToken"] = token

    def read(self, key: str) -> bytes:
        return self._call(
            self._media(key),
            {"alt": "media"},
            {},
            f"Cannot read {self._url(key)}",
            http_client.read,
        )

    def download(self, obj: RemoteObject, dest: Path) -> None:
        what = f"Cannot download {self._url(obj.key)}"

        def get(headers: dict[str, str], use: Callable[[http_client.Response], int]) -> int:
            query = {"alt": "media"}
            tag = headers.get("If-Match")
            if tag:  # a part reads the listed generation: a replaced object 404s, not mixes
                query["generation"] = tag.split(":", 1)[0]
            ranged = {name: value for name, value in headers.items() if name != "If-Match"}
            return self._call(self._media(obj.key), query, ranged, what, use)

        def digest(response: http_client.Response) -> checksums.Digest | None:
            return hash_of(response.getheader("x-goog-hash", ""), "x-goog-hash") or hash_of(
                obj.hashes, "listing"
            )

        download.download(obj, dest, what, get, GZIP_HINT, digest)

    def _url(self, key: str) -> str:
        return f"gs://{self.bucket}/{key}"

    def _media(self, key: str) -> str:
        return f"/download{self._objects}/{quote(key, safe='~')}"

    def _call(
        self,
        path: str,
        query: dict[str, str],
        headers: dict[str, str],
        what: str,
        use: Callable[[http_client.Response], T],
        listing: bool = False,
    ) -> T:
        url = f"{path}?{urlencode(query)}"

        def fail(exc: http_client.Failure) -> StorageError:
            return StorageError(f"{what}: {self._describe(exc, url, listing)}")

        def once() -> T:
            sent = {**headers, **(self._token.header(what) if self._token else {})}
            return self._connections.get(self._origin, url, sent, _failure, use)

        return http_client.retrying(once, fail, f"{what}: cannot reach Cloud Storage", self._renew)

    def _renew(self, exc: http_client.Failure) -> bool:
        """A 401 with a token goes again once with a new one (as google-auth's session)."""
        return exc.status == 401 and self._token is not None and self._token.forget()

    def _describe(self, exc: http_client.Failure, url: str, listing: bool) -> str:
        """The cause in the words of the SDK client (google-api-core's messages)."""
        if exc.status == 404:
            return not_found(self.bucket, listing)
        message = f"GET {self._origin}{url}: {exc.message}"
        if exc.status in (401, 403):
            return f"access denied: {message}"
        return f"{exc.status} {message}"


_LISTED_HASHES = (("crc32c", "crc32c"), ("md5", "md5Hash"))


def _object(item: dict[str, Any]) -> RemoteObject:
    """One item of an objects.list page."""
    tag = f"{item.get('generation')}:{item.get('md5Hash') or item.get('etag')}"
    hashes = ",".join(f"{name}={item[field]}" for name, field in _LISTED_HASHES if item.get(field))
    return RemoteObject(item["name"], int(item.get("size") or 0), tag, hashes)


def hash_of(hashes: str, source: str) -> checksums.Digest | None:
    """The digest to check from `crc32c=<b64>,md5=<b64>` (x-goog-hash, or the listing's):
    CRC32C where google-crc32c is installed, as google-cloud-storage prefers it, else MD5 (a
    composite object has none)."""
    named = dict(item.strip().partition("=")[::2] for item in hashes.split(",") if "=" in item)
    for algorithm in ("crc32c", "md5"):
        found = checksums.from_base64(algorithm, named.get(algorithm, ""), source)
        if found is not None:
            return found
    return None


def _failure(response: http_client.Response, body: bytes) -> http_client.Failure:
    """An error answer; Cloud Storage words it in JSON: {"error": {"message": ...}}, anything
    else (a front end's page, a metadata server's text) is the message as it came, as
    google-api-core takes it (cut short here)."""
    message: Any = body[:300].decode("utf-8", "replace").strip() or "unknown error"
    with contextlib.suppress(ValueError, KeyError, TypeError):
        message = json.loads(body)["error"]["message"] or message
    return http_client.Failure(response.status, str(response.status), str(message))
