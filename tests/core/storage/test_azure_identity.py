"""A managed identity, the recommended Azure Functions credential, works out of the box:
azure-identity comes with the azure extra, and the Blob client the storage layer builds for an
account URL gets its token from the Functions host's identity endpoint (IDENTITY_ENDPOINT /
IDENTITY_HEADER, as App Service and Functions set them), here a local stand-in on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.handlers.conftest import ROOT

SECRET = "identity-header-value"


class _Identity(BaseHTTPRequestHandler):
    seen: list[dict[str, Any]] = []

    def do_GET(self) -> None:  # noqa: N802
        query = parse_qs(urlsplit(self.path).query)
        self.seen.append({"header": self.headers.get("X-IDENTITY-HEADER"), "query": query})
        body = json.dumps(
            {
                "access_token": "token-from-the-identity",
                "token_type": "Bearer",
                "expires_on": str(int(time.time()) + 3600),
                "resource": query["resource"][0],
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def identity_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Identity)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for key in (
        "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_STORAGE_ACCOUNT_URL",
        "AZURE_CLIENT_ID",
        "AZURE_TENANT_ID",
        "AZURE_CLIENT_SECRET",
        "AZURE_FEDERATED_TOKEN_FILE",
        "MSI_ENDPOINT",
        "MSI_SECRET",
    ):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "ovsmodels")
    monkeypatch.setenv("IDENTITY_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}/msi")
    monkeypatch.setenv("IDENTITY_HEADER", SECRET)
    _Identity.seen = []
    yield _Identity.seen
    server.shutdown()
    server.server_close()


def test_azure_extra_and_code_deployment_carry_azure_identity() -> None:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["azure"]
    assert any(spec.startswith("azure-identity") for spec in extra)
    lines = (ROOT / "infra" / "azure" / "requirements.txt").read_text().splitlines()
    assert any(line.startswith("azure-identity") for line in lines)


def test_account_url_gets_a_managed_identity_token(identity_endpoint: list[dict[str, Any]]) -> None:
    from azure.identity import DefaultAzureCredential

    from core.storage.azure.sdk import make_service

    client = make_service()
    assert client.url.startswith("https://ovsmodels.blob.core.windows.net")
    assert isinstance(client.credential, DefaultAzureCredential)
    token = client.credential.get_token("https://storage.azure.com/.default")
    assert token.token == "token-from-the-identity"
    (call,) = identity_endpoint
    assert call["header"] == SECRET
    assert call["query"]["resource"] == ["https://storage.azure.com"]
