"""Shared bench helpers: model repositories, server subprocesses, load loops, stats, RSS."""

from __future__ import annotations

import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
REPO = Path(__file__).resolve().parents[1]
Row = dict[str, float]
Call = Callable[[], object]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def base_env(**extra: str) -> dict[str, str]:
    """This environment without OVS_* / platform variables, plus `extra`."""
    drop = ("OVS_", "AWS_LAMBDA", "K_SERVICE", "FUNCTIONS_WORKER")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONPATH"] = str(REPO)
    return env | extra


@contextmanager
def environ(extra: dict[str, str], drop: tuple[str, ...] = ()) -> Iterator[None]:
    """This process's environment with `drop` removed and `extra` set, restored on exit."""
    saved = {name: os.environ.pop(name) for name in (*drop, *extra) if name in os.environ}
    os.environ.update(extra)
    try:
        yield
    finally:
        for name in extra:
            os.environ.pop(name, None)
        os.environ.update(saved)


@contextmanager
def process(
    cmd: list[str],
    env: dict[str, str],
    ready: Callable[[], bool],
    timeout: float = 120,
    log: Path | None = None,
    cwd: Path = REPO,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run `cmd` (in `cwd`) until `ready()` answers True; terminate it (and wait) on exit."""
    out = log.open("ab") if log else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=out, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            if proc.poll() is not None:
                tail = log.read_text()[-2000:] if log else ""
                raise RuntimeError(f"{cmd[:3]} exited with {proc.returncode}\n{tail}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{cmd[:3]} not ready in {timeout} s")
            time.sleep(0.01)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log:
            out.close()  # type: ignore[union-attr]


def http_ok(
    port: int,
    path: str,
    method: str = "GET",
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        response.read()
        return response.status == 200
    except OSError:
        return False
    finally:
        conn.close()


def ov_serve_cmd(config: Path, rest_port: int, grpc_port: int = 0) -> list[str]:
    return [
        sys.executable,
        "-m",
        "handlers.cli",
        "serve",
        "--config_path",
        str(config),
        "--rest_port",
        str(rest_port),
        "--port",
        str(grpc_port),
        "--log_level",
        "WARNING",
    ]


# -- load ------------------------------------------------------------------------------------


def latencies(call: Call, count: int, warmup: int = 5) -> list[float]:
    for _ in range(warmup):
        call()
    times = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return times


def one_client(call: Call, count: int, warmup: int = 5) -> Row:
    return _row(latencies(call, count, warmup))


def _row(times: list[float]) -> Row:
    """Back-to-back latencies -> their summary, the req/s they add up to, and the count."""
    return {**summary(times), "rps": len(times) / sum(times), "n": len(times)}


def paired(call: Call, raw_call: Call, count: int, blocks: int = 5) -> tuple[Row, Row]:
    """`call` and the raw baseline in alternating blocks of count/blocks calls, so a slow
    spell of the machine slows both alike; (served row, raw row)."""
    size = max(1, count // blocks)
    latencies(raw_call, 0, warmup=5)
    latencies(call, 0, warmup=5)
    served: list[float] = []
    raw: list[float] = []
    for _ in range(blocks):
        raw += latencies(raw_call, size, warmup=0)
        served += latencies(call, size, warmup=0)
    return _row(served), _row(raw)


def many_clients(factory: Callable[[], Call], clients: int, count: int) -> Row:
    """`clients` threads, each with its own connection (`factory()`), `count` calls each."""
    barrier = threading.Barrier(clients + 1)

    def client() -> list[float]:
        call = factory()
        for _ in range(2):
            call()
        barrier.wait()
        return latencies(call, count, warmup=0)

    with futures.ThreadPoolExecutor(clients) as pool:
        running = [pool.submit(client) for _ in range(clients)]
        barrier.wait()
        started = time.perf_counter()
        times = [t for job in running for t in job.result()]
        wall = time.perf_counter() - started
    return {**summary(times), "rps": len(times) / wall, "n": len(times)}


def summary(times: list[float]) -> Row:
    ordered = sorted(times)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {
        "p50_ms": 1e3 * statistics.median(ordered),
        "p90_ms": 1e3 * pick(0.9),
        "p99_ms": 1e3 * pick(0.99),
    }


# -- memory ----------------------------------------------------------------------------------


def _status(pid: int, key: str) -> str:
    """A field of /proc/PID/status ("" when the process is gone or has no such field)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def _status_kb(pid: int, key: str) -> int:
    value = _status(pid, key)
    return int(value.split()[0]) if value else 0


def tree(pid: int) -> list[int]:
    """`pid` and its descendants, found by their PPid (/proc/PID/task/PID/children needs
    CONFIG_PROC_CHILDREN, which not every kernel has)."""
    found = [pid]
    for status in Path("/proc").glob("[0-9]*/status"):
        child = int(status.parent.name)
        if _status(child, "PPid") == str(pid):
            found.extend(tree(child))
    return found


def _private_kb(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    return sum(
        int(line.split()[1])
        for line in text.splitlines()
        if line.startswith(("Private_Clean:", "Private_Dirty:"))
    )


def rss_mb(pid: int) -> dict[str, float]:
    """Resident memory of a process tree, MB: the root's VmRSS plus the private memory of its
    descendants (pages a forked worker shares with its parent count once), and the peak
    (sum of VmHWM: an upper bound)."""
    root, *children = tree(pid)
    return {
        "rss_mb": (_status_kb(root, "VmRSS") + sum(map(_private_kb, children))) / 1024,
        "peak_mb": sum(_status_kb(p, "VmHWM") for p in (root, *children)) / 1024,
    }


# -- files -----------------------------------------------------------------------------------


def workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="ovs-bench-"))


def save(name: str, doc: object) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(doc, indent=2))
    return path


def median_of(rows: list[dict[str, Any]]) -> dict[str, float]:
    keys = [k for k, v in rows[0].items() if isinstance(v, int | float)]
    return {k: statistics.median(float(r[k]) for r in rows) for k in keys}
