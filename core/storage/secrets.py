"""Secrets never leave the storage layer in a message: `redact(text)` and the StorageError
every module of core.storage raises, whose message is redacted when it is made.

Redacted: the values of the credentials this process holds (AWS_SECRET_ACCESS_KEY,
AWS_SESSION_TOKEN, an Azure connection string's AccountKey and SharedAccessSignature, the SAS of
AZURE_STORAGE_ACCOUNT_URL, a Google key file's private key, tokens and client secret, and
the tokens `register` is given: the metadata server's), wherever and however a server echoes
them; and by shape, the query string of any URL, secret-looking parameters (sig=, token=,
AccountKey=, X-Amz-Signature=...), the user:password of a URL and Authorization values.
"""

from __future__ import annotations

import json
import os
import re
import threading
from urllib.parse import parse_qsl, unquote

from core import errors

MASK = "<redacted>"
MIN_SECRET_CHARS = 8  # shorter values (an emulator's "testing") would mangle ordinary words
_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")
_GOOGLE_KEYS = ("private_key", "private_key_id", "refresh_token", "client_secret", "token")
_PARAMS = (
    "sig",
    "signature",
    "x-amz-signature",
    "x-amz-security-token",
    "x-amz-credential",
    "access_token",
    "refresh_token",
    "id_token",
    "token",
    "client_secret",
    "password",
    "accountkey",
    "sharedaccesssignature",
    "credential",
)
_SHAPES = (
    # the query string of an absolute URL (a SAS, a presigned URL): all of it
    (
        re.compile(r"(\b[a-z][a-z0-9+.-]*://[^\s?#'\"<>]*)\?(?:(?!:\s)[^\s#'\"<>])*", re.I),
        rf"\1?{MASK}",
    ),
    # name=value pairs that carry a secret, in a relative URL, a header or a connection string
    (
        re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, _PARAMS)) + r")=[^&;,\s'\"<>]+", re.I),
        rf"\1={MASK}",
    ),
    (re.compile(r"(://)[^/\s@'\"<>]+@"), rf"\1{MASK}@"),  # user:password@host
    (re.compile(r"\b(Bearer|SharedKey|SharedKeyLite|Basic)\s+[^\s'\",]+", re.I), rf"\1 {MASK}"),
)
_registered: set[str] = set()
_lock = threading.Lock()


def register(secret: str) -> None:
    """A credential obtained at run time (a token): redacted from now on."""
    if len(secret) >= MIN_SECRET_CHARS:
        with _lock:
            _registered.add(secret)


def redact(text: str) -> str:
    for secret in sorted(_known(), key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    for pattern, mask in _SHAPES:
        text = pattern.sub(mask, text)
    return text


def _known() -> set[str]:
    """Every credential value the process holds now, in the forms a server may echo it."""
    env = os.environ
    found = {env.get(name, "").strip() for name in _ENV}
    conn = env.get("AZURE_STORAGE_CONNECTION_STRING", "")
    for item in conn.split(";"):
        name, _, value = item.partition("=")
        if name.strip().lower() in ("accountkey", "sharedaccesssignature"):
            found |= _sas_parts(value.strip())
    account_url = env.get("AZURE_STORAGE_ACCOUNT_URL", "")
    if "?" in account_url:
        found |= _sas_parts(account_url.partition("?")[2].strip())
    found |= _google_key_file(env.get("GOOGLE_APPLICATION_CREDENTIALS", ""))
    with _lock:
        found |= _registered
    return {secret for secret in found if len(secret) >= MIN_SECRET_CHARS}


def _sas_parts(value: str) -> set[str]:
    """A key or SAS token as written, decoded, and (a SAS) its signature alone."""
    parts = {value, unquote(value)}
    for name, item in parse_qsl(value.lstrip("?"), keep_blank_values=True):
        if name.lower() == "sig":
            parts |= {item, unquote(item)}
    return parts


def _google_key_file(path: str) -> set[str]:
    if not path:
        return set()
    try:
        with open(path, encoding="utf-8") as file:
            doc = json.load(file)
    except (OSError, ValueError):
        return set()
    if not isinstance(doc, dict):
        return set()
    values = {str(doc.get(name) or "") for name in _GOOGLE_KEYS}
    # a PEM key may come back one line at a time
    return values | {line for v in values for line in v.splitlines()}


class StorageError(errors.StorageError):
    """core.errors.StorageError whose message never holds a credential (see the module doc)."""

    def __init__(self, message: str) -> None:
        super().__init__(redact(message))
