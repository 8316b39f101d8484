"""Helpers for the storage tests: a tiny OpenVINO IR and per-provider bucket seeders."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.emulators import Emulator

# Variables that would send a client somewhere other than the emulator under test.
_FOREIGN_ENV = (
    "S3_ENDPOINT",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_PROFILE",
    "AWS_SESSION_TOKEN",
    "STORAGE_EMULATOR_HOST",
    "API_ENDPOINT_OVERRIDE",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GCE_METADATA_HOST",
    "GCE_METADATA_IP",
    "K_SERVICE",
    "CLOUD_RUN_JOB",
    "FUNCTION_TARGET",
    "NO_GCE_CHECK",
    "GOOGLE_API_USE_CLIENT_CERTIFICATE",
    "CLOUDSDK_CONTEXT_AWARE_USE_CLIENT_CERTIFICATE",
    "GOOGLE_API_CERTIFICATE_CONFIG",
    "CLOUDSDK_CONTEXT_AWARE_CERTIFICATE_CONFIG_FILE_PATH",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_ACCOUNT_URL",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "OVS_S3_CLIENT",
    "OVS_AZURE_CLIENT",
    "OVS_GCS_CLIENT",
)


def use_env(monkeypatch: pytest.MonkeyPatch, emulator: Emulator) -> None:
    for name in _FOREIGN_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in {**emulator.env, "NO_PROXY": "127.0.0.1,localhost"}.items():
        monkeypatch.setenv(name, value)


def tiny_ir(scale: float) -> dict[str, bytes]:
    """model.xml + model.bin of y = x * scale, x: f32[1,4]."""
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([1, 4], ov.Type.f32, name="input")
    y = ops.multiply(x, ops.constant(np.full([1, 4], scale, np.float32)))
    model = ov.Model([ops.result(y)], [x], "tiny")
    with tempfile.TemporaryDirectory() as tmp:
        ov.save_model(model, f"{tmp}/model.xml", compress_to_fp16=False)
        return {name: Path(tmp, name).read_bytes() for name in ("model.xml", "model.bin")}


def infer(folder: Path) -> np.ndarray:
    import openvino as ov

    compiled = ov.Core().compile_model(folder / "model.xml", "CPU")
    out: np.ndarray = compiled(np.ones([1, 4], np.float32))[0]
    return out


class Store:
    """A fresh bucket on one emulator, written with the provider's own SDK; `env` is what the
    server under test runs with beyond the emulator's variables."""

    scheme = ""
    env: dict[str, str] = {}

    def __init__(self, emulator: Emulator) -> None:
        self.emulator = emulator
        self.bucket = f"models-{uuid.uuid4().hex[:12]}"

    def url(self, path: str = "") -> str:
        return f"{self.scheme}://{self.bucket}/{path}".rstrip("/")

    def create(self) -> Store:
        raise NotImplementedError

    def put(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def delete(self, key: str) -> None:
        raise NotImplementedError

    def put_version(self, prefix: str, version: int, scale: float) -> dict[str, bytes]:
        files = tiny_ir(scale)
        for name, data in files.items():
            self.put(f"{prefix}/{version}/{name}", data)
        return files


class S3Store(Store):
    scheme = "s3"

    def create(self) -> Store:
        import boto3

        self.client: Any = boto3.client("s3", endpoint_url=self.emulator.endpoint)
        self.client.create_bucket(Bucket=self.bucket)
        return self

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data)

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=key)


class S3Boto3Store(S3Store):
    """S3 read through boto3 (profiles, roles, proxies), not the REST client env credentials
    pick."""

    env = {"OVS_S3_CLIENT": "boto3"}


class GcsStore(Store):
    scheme = "gs"

    def create(self) -> Store:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        client = storage.Client(project="test", credentials=AnonymousCredentials())
        self.handle: Any = client.create_bucket(self.bucket)
        return self

    def put(self, key: str, data: bytes) -> None:
        self.handle.blob(key).upload_from_string(data)

    def delete(self, key: str) -> None:
        self.handle.blob(key).delete()


class GcsSdkStore(GcsStore):
    """Cloud Storage read through google-cloud-storage (key files, other hosts), not the REST
    client the emulator picks."""

    env = {"OVS_GCS_CLIENT": "sdk"}


class AzureStore(Store):
    scheme = "az"

    def create(self) -> Store:
        from azure.storage.blob import BlobServiceClient

        service = BlobServiceClient.from_connection_string(self.emulator.env[_AZ_CONN])
        self.handle: Any = service.create_container(self.bucket)
        return self

    def put(self, key: str, data: bytes) -> None:
        self.handle.upload_blob(key, data, overwrite=True)

    def delete(self, key: str) -> None:
        self.handle.delete_blob(key)


class AzureSdkStore(AzureStore):
    """Azure read through azure-storage-blob (managed identities), not the REST client a
    connection string picks."""

    env = {"OVS_AZURE_CLIENT": "sdk"}


_AZ_CONN = "AZURE_STORAGE_CONNECTION_STRING"
STORES: dict[str, type[Store]] = {
    "s3": S3Store,
    "s3-boto3": S3Boto3Store,
    "gs": GcsStore,
    "gs-sdk": GcsSdkStore,
    "az": AzureStore,
    "az-sdk": AzureSdkStore,
}


def use_store_env(monkeypatch: pytest.MonkeyPatch, emulator: Emulator, name: str) -> Store:
    """A fresh bucket of STORES[name] on `emulator`, and the environment to read it with."""
    store = STORES[name](emulator)
    use_store_env_again(monkeypatch, store)
    return store.create()


def use_store_env_again(monkeypatch: pytest.MonkeyPatch, store: Store) -> None:
    use_env(monkeypatch, store.emulator)
    for key, value in store.env.items():
        monkeypatch.setenv(key, value)


_FETCH_PROBE = """
import json, pathlib, sys, tempfile
from core.storage import open_repository
repo = open_repository(sys.argv[1], pathlib.Path(tempfile.mkdtemp()))
assert (repo.fetch(1).folder / "model.xml").is_file()
print(json.dumps(sorted(sys.modules)))
"""


def read_version_1(store: Store, cache_dir: Path) -> dict[str, bytes]:
    """Every file of version 1 of model `m` in `store`, fetched as the server fetches it."""
    from core.storage import open_repository

    folder = open_repository(store.url("m"), cache_dir).fetch(1).folder
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


Answer = tuple[int, dict[str, str], bytes]  # status, headers, body


class Front:
    """A threaded HTTP/1.1 server on 127.0.0.1 (keep-alive, as the providers' doors) whose
    GETs `answer(request)` serves; `host` is its host:port."""

    def __init__(self) -> None:
        import http.server
        import threading

        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                status, headers, body = front.answer(self)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                if not any(name.lower() == "content-length" for name in headers):
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    front.write(self.wfile, body)

            do_HEAD = do_GET  # the headers of the GET's answer (boto3 heads before a download)
            do_POST = do_GET  # an OAuth token request (answer() reads the body)

            def log_message(self, *args: Any) -> None:
                pass

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.host = f"127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def answer(self, request: Any) -> Answer:
        raise NotImplementedError

    def write(self, out: Any, body: bytes) -> None:
        """An answer's body onto the connection (at once; a subclass may pace it)."""
        out.write(body)

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def forward(port: int, path: str, headers: dict[str, str], method: str = "GET") -> Answer:
    """A GET (or `method`) passed on to the emulator on `port` -> its (status, headers, body),
    less the headers of that hop (for test fronts that stand where the provider's door
    would); a HEAD's answer keeps its Content-Length (the object's or part's)."""
    import http.client

    hop = ("connection", "server", "date", "transfer-encoding", "keep-alive")
    if method != "HEAD":
        hop += ("content-length",)
    upstream = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        upstream.request(method, path, headers=headers)
        reply = upstream.getresponse()
        body = reply.read()
    finally:
        upstream.close()
    kept = {name: value for name, value in reply.getheaders() if name.lower() not in hop}
    return reply.status, kept, body


def modules_of_a_fetch(url: str, env: dict[str, str]) -> set[str]:
    """The modules a fresh interpreter holds after fetching version 1 of `url` with `env`."""
    import json
    import subprocess
    import sys

    from tests.emulators import REPO

    out = subprocess.run(
        [sys.executable, "-c", _FETCH_PROBE, url],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(json.loads(out.stdout))
