"""Helpers for the hot-reload tests: scaler versions written atomically into a local
repository, config files replaced atomically, an in-process App, a bounded closed-loop client
and a status recorder.

A version of the demo scaler multiplies by its version number, so every answer names the
version that computed it.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from core.api import App, make_request
from core.config import Settings
from core.serving.registry import ModelManager
from demo import models

X = [1.0, 2.0, 3.0, 4.0]
GARBAGE = b"\x00"  # shorter than any weight: a scaler's .bin is one 4-byte float
STATE_RANK = {"START": 10, "LOADING": 20, "AVAILABLE": 30, "UNLOADING": 40, "END": 50}

# (method, path, JSON body or None) -> (HTTP status, decoded JSON body or None)
Send = Callable[[str, str, Any], tuple[int, Any]]


# -- the repository ----------------------------------------------------------------------------


def _staging(root: Path) -> Path:
    """A scratch folder beside (never inside) the model folders."""
    folder = root.parent / f".staging-{uuid.uuid4().hex}"
    folder.mkdir(parents=True)
    return folder


def put_version(
    base: Path, version: int, factor: float | None = None, shape: tuple[int, ...] = (-1, 4)
) -> Path:
    """A complete scaler version, published by one rename (a poller never sees half of it)."""
    staging = _staging(base)
    models.save(models.scaler(float(version if factor is None else factor), shape), staging)
    target = base / str(version)
    base.mkdir(parents=True, exist_ok=True)
    staging.rename(target)
    return target


def put_corrupt_version(base: Path, version: int, broken: str) -> Path:
    """A version whose `broken` file ("model.xml" or "model.bin") is garbage."""
    staging = _staging(base)
    models.save(models.scaler(float(version)), staging)
    (staging / broken).write_bytes(GARBAGE)
    target = base / str(version)
    staging.rename(target)
    return target


def corrupt_in_place(folder: Path, broken: str = "model.bin") -> None:
    """Change a served version's file to garbage (size and mtime change)."""
    path = folder / broken
    scratch = path.with_name(path.name + ".new")
    scratch.write_bytes(GARBAGE)
    os.replace(scratch, path)


def remove_version(base: Path, version: int) -> None:
    """Delete a version folder: moved away first so no poll sees it half deleted."""
    gone = base.parent / f".gone-{uuid.uuid4().hex}"
    (base / str(version)).rename(gone)
    shutil.rmtree(gone)


def write_config_atomic(
    path: Path, entries: Sequence[Mapping[str, Any]] | None = None, raw: str | None = None
) -> Path:
    text = (
        raw
        if raw is not None
        else json.dumps(
            {"model_config_list": [{"config": dict(e)} for e in entries or []]}, indent=1
        )
    )
    scratch = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    scratch.write_text(text)
    os.replace(scratch, path)
    return path


# -- in-process serving ------------------------------------------------------------------------


def start_app(settings: Settings) -> App:
    return App(ModelManager.start(settings), settings)


def app_sender(app: App) -> Send:
    def send(method: str, path: str, doc: Any = None) -> tuple[int, Any]:
        body = b"" if doc is None else orjson.dumps(doc)
        response = app.handle(make_request(method, path, body))
        return response.status, orjson.loads(response.body) if response.body else None

    return send


def predict_path(name: str, version: int | None) -> str:
    return f"/v1/models/{name}" + (f"/versions/{version}" if version else "") + ":predict"


def predict(send: Send, name: str, version: int | None = None) -> tuple[int, Any]:
    """TFS row predict of X -> (status, the factor the answer proves, or the error text)."""
    status, doc = send("POST", predict_path(name, version), {"instances": [X]})
    if status != 200:
        return status, doc["error"] if isinstance(doc, dict) else doc
    return status, factor_of(doc["predictions"][0])


def factor_of(row: Sequence[float]) -> float:
    factor = row[0] / X[0]
    assert [factor * x for x in X] == list(row), row
    return factor


def states(send: Send, name: str) -> dict[int, tuple[str, str]]:
    """version -> (state, error_message) from GET /v1/models/<name>."""
    status, doc = send("GET", f"/v1/models/{name}", None)
    assert status == 200, doc
    return {
        int(v["version"]): (v["state"], v["status"]["error_message"])
        for v in doc["model_version_status"]
    }


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 10.0) -> float:
    """Poll `check` until true; -> the monotonic time it became true."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return time.monotonic()


# -- load and observation ----------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    thread: int
    version: int | None  # None: "latest"
    started: float
    ended: float
    status: int
    result: Any  # the factor, or the error text


@dataclass
class ClosedLoopClient:
    """`threads` threads, each alternating a "latest" predict and an explicit predict of one
    of `explicit` (versions known to stay available), at most `per_thread` requests each,
    until stopped or `deadline_s` passes."""

    make_send: Callable[[], Send]
    name: str
    explicit: Sequence[int]
    threads: int = 4
    per_thread: int = 150
    pause_s: float = 0.03
    deadline_s: float = 40.0
    answers: list[Answer] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _workers: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> ClosedLoopClient:
        for index in range(self.threads):
            worker = threading.Thread(target=self._loop, args=(index,), daemon=True)
            worker.start()
            self._workers.append(worker)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for worker in self._workers:
            worker.join(timeout=30)

    def _loop(self, index: int) -> None:
        send = self.make_send()
        deadline = time.monotonic() + self.deadline_s
        for count in range(self.per_thread):
            if self._stop.is_set() or time.monotonic() > deadline:
                return
            version = None if count % 2 == 0 else self.explicit[count // 2 % len(self.explicit)]
            started = time.monotonic()
            try:
                status, result = predict(send, self.name, version)
            except Exception as exc:  # a dropped connection is a failed request too
                status, result = -1, repr(exc)
            answer = Answer(index, version, started, time.monotonic(), status, result)
            with self._lock:
                self.answers.append(answer)
            time.sleep(self.pause_s)


@dataclass
class StatusRecorder:
    """Polls GET /v1/models/<name> in a thread; keeps (time, {version: (state, error)})."""

    send: Send
    name: str
    period_s: float = 0.02
    snapshots: list[tuple[float, dict[int, tuple[str, str]]]] = field(default_factory=list)
    sent: list[float] = field(default_factory=list)  # when each snapshot's request was sent
    _stop: threading.Event = field(default_factory=threading.Event)
    _worker: threading.Thread | None = None

    def __enter__(self) -> StatusRecorder:
        self._worker = threading.Thread(target=self._loop, daemon=True)
        self._worker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._worker is not None:
            self._worker.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            sent = time.monotonic()
            snapshot = states(self.send, self.name)
            self.sent.append(sent)
            self.snapshots.append((time.monotonic(), snapshot))

    def assert_answers_from_available(self, answers: Sequence[Answer]) -> None:
        """Each answer came from a version AVAILABLE while it ran: no status read that ended
        before the request started shows that version retiring, and none started after the
        answer shows it not yet AVAILABLE."""
        reads = list(zip(self.sent, self.snapshots, strict=True))
        for answer in answers:
            if answer.status != 200:
                continue
            version = int(answer.result)
            for sent, (received, snapshot) in reads:
                state = snapshot.get(version, ("ABSENT",))[0]
                if received < answer.started:
                    assert state not in ("UNLOADING", "END"), (answer, state)
                if sent > answer.ended and state not in ("UNLOADING", "END"):
                    assert state == "AVAILABLE", (answer, state)

    def history(self, version: int) -> list[str]:
        """The distinct consecutive states one version went through."""
        seen: list[str] = []
        for _, snapshot in self.snapshots:
            state = snapshot.get(version, ("",))[0]
            if state and (not seen or seen[-1] != state):
                seen.append(state)
        return seen

    def first_available(self, version: int) -> float:
        for at, snapshot in self.snapshots:
            if snapshot.get(version, ("",))[0] == "AVAILABLE":
                return at
        raise AssertionError(f"v{version} never AVAILABLE")


def assert_never_goes_back(history: Sequence[str]) -> None:
    ranks = [STATE_RANK[state] for state in history]
    assert ranks == sorted(ranks), history
