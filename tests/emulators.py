"""Real storage emulators as subprocesses on 127.0.0.1: moto (S3), gcp-storage-emulator, Azurite.

Plain classes, no pytest: `start()` launches the process on a free port and waits (bounded)
until it answers HTTP; `stop()` terminates it; `kill()` SIGKILLs it (fault tests) and
`start()` brings it back on the same port. `env` is what a client needs to reach it.
A failure to start raises EmulatorError with the command and the tail of its log.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


class EmulatorError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _venv_bin(name: str) -> str:
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else (shutil.which(name) or name)


class Emulator:
    name = "emulator"
    ready_timeout_s = 30.0

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{self.name}-"))
        self.log_path = self.workdir / "emulator.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        raise NotImplementedError

    def command(self) -> list[str]:
        raise NotImplementedError

    def ready_path(self) -> str:
        return "/"

    def start(self) -> Emulator:
        if self.proc and self.proc.poll() is None:
            return self
        cmd = self.command()
        with self.log_path.open("ab") as log:
            try:
                self.proc = subprocess.Popen(
                    cmd,
                    cwd=self.workdir,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env={**os.environ, "NO_PROXY": "*", "no_proxy": "*"},
                )
            except OSError as exc:
                raise EmulatorError(f"{self.name}: cannot run {cmd[0]}: {exc}") from exc
        self._wait_ready(cmd)
        return self

    def _wait_ready(self, cmd: list[str]) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.ready_timeout_s
        url = self.endpoint + self.ready_path()
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._fail(cmd, f"exited with code {self.proc.returncode}")
            try:
                with urllib.request.urlopen(url, timeout=1):
                    return
            except urllib.error.HTTPError:
                return  # any HTTP answer means it is serving
            except OSError:
                time.sleep(0.1)
        self.stop()
        self._fail(cmd, f"did not answer {url} within {self.ready_timeout_s:.0f} s")

    def _fail(self, cmd: list[str], why: str) -> None:
        tail = self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""
        raise EmulatorError(f"{self.name} ({' '.join(cmd)}) {why}. Log tail:\n{tail}")

    def kill(self) -> None:
        """SIGKILL, as a crash would; the port refuses connections afterwards."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


class MotoS3(Emulator):
    name = "moto"

    def command(self) -> list[str]:
        return [_venv_bin("moto_server"), "-H", HOST, "-p", str(self.port)]

    def ready_path(self) -> str:
        return "/moto-api/"

    @property
    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL_S3": self.endpoint,
        }


class FakeGcs(Emulator):
    name = "gcp-storage-emulator"

    def command(self) -> list[str]:
        cmd = [_venv_bin("gcp-storage-emulator"), "start", "--host", HOST]
        return [*cmd, "--port", str(self.port), "--in-memory"]

    @property
    def env(self) -> dict[str, str]:
        return {"STORAGE_EMULATOR_HOST": self.endpoint, "GOOGLE_CLOUD_PROJECT": "test"}


def azurite_binary() -> str:
    explicit = os.environ.get("AZURITE_BLOB")
    candidates = [
        explicit,
        str(REPO / ".ci" / "azurite" / "node_modules" / ".bin" / "azurite-blob"),
        shutil.which("azurite-blob"),
    ]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return candidate
    raise EmulatorError(
        "azurite-blob not found: run scripts/install-azurite.sh (or set AZURITE_BLOB)"
    )


class Azurite(Emulator):
    name = "azurite"

    def command(self) -> list[str]:
        return [
            azurite_binary(),
            "--inMemoryPersistence",
            "--blobHost",
            HOST,
            "--blobPort",
            str(self.port),
            "--skipApiVersionCheck",
            "--loose",
            "--silent",
            "--disableTelemetry",
        ]

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
            f"AccountKey={AZURITE_KEY};BlobEndpoint={self.endpoint}/{AZURITE_ACCOUNT};"
        )

    @property
    def env(self) -> dict[str, str]:
        return {"AZURE_STORAGE_CONNECTION_STRING": self.connection_string}


EMULATORS: dict[str, type[Emulator]] = {"s3": MotoS3, "gs": FakeGcs, "az": Azurite}
