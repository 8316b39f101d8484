"""The granian candidate for the REST front of `serve`, measured by bench/front.py against
handlers.http_server: the same constructor, `serve_forever`, `shutdown` and `drain`.

granian's WSGI worker (Rust, hyper: HTTP/1.1 and HTTP/2) runs in this process on a listening
socket made before the models load (early clients queue in its backlog), and calls `handle`
synchronously on its Python threads. granian's embedded API (granian.server.embed) serves only
ASGI/RSGI on one event loop, and its thread-worker server (granian.server.mt) only a
free-threaded Python, so this drives the worker class those servers use (granian._granian).

Added here: a body over `max_body` is refused from its Content-Length before it is read (413;
a chunked body once it passes the limit); a body still unread after `read_timeout` seconds gets
a 408 (a stalled head: hyper closes the connection after the same time); at most `threads`
requests run the handler at once, while a slow client holds only its own reading thread.
`shutdown()` closes the listener (new connections are refused) and idle keep-alive
connections; `drain()` waits for the requests in flight.

Not matched (hyper answers itself, with an empty body and no CORS headers): a malformed request
line or header (400), a head over MAX_HEAD bytes or with over 100 headers (431), an unknown
HTTP version or Transfer-Encoding (400); an unknown Expect is ignored (no 417); a malformed
chunked body reaches the handler cut short instead of a 400.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from granian import _granian
from granian._futures import _new_cbscheduler
from granian._loops import loops
from granian.http import HTTP1Settings, HTTP2Settings

from core.api import Request, Response, refusal

MAX_HEAD = 64 * 1024
MAX_CONNECTIONS = 1024
READERS = 256  # Python threads granian may start: the handler slots plus slow readers
BACKLOG = 1024
POLL = 0.1  # seconds: a stalled body is answered at most this late
_NO_TLS: tuple[Any, ...] = (False, None, None, None, "tls1.3", None, [], False)


log = logging.getLogger("ov_serverless.http")
Handler = Callable[[Request], Response]
# (status, message, path, request headers) -> the answer, in the route's error shape
Refuse = Callable[[int, str, str, Mapping[str, str]], Response]
BODY_TIMEOUT = "Request body not received in time (--rest_read_timeout_seconds)"


def _ovms_shape(status: int, message: str, path: str, headers: Mapping[str, str]) -> Response:
    return refusal(status, message)


def listen(host: str, port: int) -> socket.socket:
    """The listening socket; bound before the models load, so clients queue meanwhile."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host.strip("[]"), port), family=family, backlog=BACKLOG)


class Server:
    def __init__(
        self,
        handle: Handler,
        listener: socket.socket,
        *,
        threads: int,
        read_timeout: float,
        max_body: int,
        refuse: Refuse | None = None,
    ) -> None:
        """`refuse`: the server's own answers in the shape of the app's (App.refuse: the
        route's error shape, CORS); without it, the OVMS error shape."""
        self._handle = handle
        self._refuse = refuse or _ovms_shape
        self._listener = listener
        self._port = int(listener.getsockname()[1])
        self._slots = threading.BoundedSemaphore(threads)
        self._read_timeout = read_timeout or None  # 0: wait forever
        self._max_body = max_body
        self._deadlines = _Deadlines()
        self._signal: Any = _granian.WorkerSignal()
        self._stopping = threading.Event()
        self._drained = threading.Event()
        self._py_threads = max(READERS, threads + 16)

    @property
    def port(self) -> int:
        return self._port

    def serve_forever(self) -> None:
        """Serve until shutdown(); the requests in flight then finish (see drain)."""
        runtime: Any = _granian  # its stub lags the classes: these calls follow granian.server
        holder = runtime.SocketHolder(self._listener.detach(), False, BACKLOG)  # it closes it
        self._signal.add_cb(self._drained.set)
        loop = loops.get("asyncio")
        scheduler = _new_cbscheduler(loop, self._call, impl_asyncio=True)
        worker = runtime.WSGIWorker(
            1,
            (None, holder),
            None,
            1,
            512,
            self._py_threads,
            30,
            MAX_CONNECTIONS,
            "auto",
            *self._settings(),
            None,
            *_NO_TLS,
            (None, None),
        )
        worker.serve_mtr(scheduler, loop, self._signal)
        self._stopping.wait()
        self._signal.set()
        loop.close()

    def shutdown(self) -> None:
        """Stop accepting (safe from a signal handler or any thread)."""
        self._stopping.set()

    def drain(self, grace: float) -> bool:
        """Wait up to `grace` seconds for the requests in flight; False if some are left."""
        return self._drained.wait(grace)

    # -- one request, on a granian thread ---------------------------------------------------

    def _call(self, proto: Any, environ: dict[str, Any]) -> None:
        headers = _headers(environ)
        path = environ["PATH_INFO"].encode("latin-1").decode("utf-8", "replace")
        try:
            body = self._body(
                proto, environ, lambda: self._refuse(408, BODY_TIMEOUT, path, headers)
            )
        except _Refused as exc:
            if exc.status:  # 0: the deadline thread answered already
                response = self._refuse(exc.status, exc.message, path, headers)
                proto.response_bytes(response.status, _head(response, close=True), response.body)
            return
        request = Request(
            environ["REQUEST_METHOD"], path, _query(environ["QUERY_STRING"]), headers, body
        )
        with self._slots:
            response = self._answer(request)
        proto.response_bytes(
            response.status, _head(response, close=self._stopping.is_set()), response.body
        )

    def _answer(self, request: Request) -> Response:
        try:
            return self._handle(request)
        except Exception as exc:  # App.handle answers its own errors; this is a last guard
            log.exception("REST handler failed for %s %s", request.method, request.path[:200])
            message = f"Internal server error: {type(exc).__name__}"
            return self._refuse(500, message, request.path, request.headers)

    def _body(
        self, proto: Any, environ: Mapping[str, Any], timed_out: Callable[[], Response]
    ) -> bytes:
        """The request body; `timed_out` makes the 408 the deadline thread sends."""
        length_text = environ.get("CONTENT_LENGTH")
        chunked = "HTTP_TRANSFER_ENCODING" in environ
        if not chunked and not length_text:
            return b""
        if length_text and int(length_text) > self._max_body:
            raise _Refused(
                413,
                f"Request body of {length_text} bytes exceeds the limit of {self._max_body} bytes",
            )
        limit = self._max_body + 1 if chunked else int(length_text or 0)
        timeout = self._read_timeout
        timed = self._deadlines.add(timeout, proto, timed_out) if timeout else None
        try:
            body = bytes(environ["wsgi.input"].read(limit))
        finally:
            if timed is not None and not self._deadlines.remove(timed):
                raise _Refused(0, "")  # already answered by the deadline thread
        if len(body) > self._max_body:
            raise _Refused(413, f"Request body exceeds the limit of {self._max_body} bytes")
        if not chunked and len(body) < limit:
            raise _Refused(400, "Request body shorter than its Content-Length")
        return body

    def _settings(self) -> tuple[HTTP1Settings, HTTP2Settings]:
        timeout_ms = int((self._read_timeout or 24 * 3600) * 1000)
        return (
            HTTP1Settings(header_read_timeout=timeout_ms, max_buffer_size=MAX_HEAD),
            HTTP2Settings(max_headers_size=MAX_HEAD),
        )


class _Refused(Exception):
    """A request the server answers itself (status 0: answered already)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status)
        self.status = status
        self.message = message


class _Deadlines:
    """One thread that answers 408 for the bodies still unread at their deadline."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Any, Callable[[], Response]]] = []
        self._live: set[int] = set()
        self._ids = itertools.count()
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, seconds: float, proto: Any, timed_out: Callable[[], Response]) -> int:
        key = next(self._ids)
        with self._lock:
            heapq.heappush(self._heap, (time.monotonic() + seconds, key, proto, timed_out))
            self._live.add(key)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="rest-deadlines", daemon=True
                )
                self._thread.start()
        return key

    def remove(self, key: int) -> bool:
        """False when the deadline already passed (the 408 was sent)."""
        with self._lock:
            if key in self._live:
                self._live.discard(key)
                return True
            return False

    def _run(self) -> None:
        while True:
            with self._lock:
                while self._heap and self._heap[0][1] not in self._live:
                    heapq.heappop(self._heap)
                wait = self._heap[0][0] - time.monotonic() if self._heap else POLL
                if wait > 0:  # polled, so that adding a deadline wakes no thread
                    self._lock.wait(min(wait, POLL))
                    continue
                _, key, proto, timed_out = heapq.heappop(self._heap)
                self._live.discard(key)
            response = timed_out()
            proto.response_bytes(response.status, _head(response, close=True), response.body)


def _headers(environ: Mapping[str, Any]) -> dict[str, str]:
    headers = {
        key[5:].replace("_", "-").lower(): value
        for key, value in environ.items()
        if key.startswith("HTTP_")
    }
    if "CONTENT_TYPE" in environ:
        headers["content-type"] = environ["CONTENT_TYPE"]
    if "CONTENT_LENGTH" in environ:
        headers["content-length"] = environ["CONTENT_LENGTH"]
    return headers


def _query(text: str) -> dict[str, str]:
    if not text:
        return {}
    from urllib.parse import parse_qsl

    return dict(parse_qsl(text, keep_blank_values=True))


def _head(response: Response, close: bool) -> list[tuple[str, str]]:
    head = [("server", "ov-serverless"), *response.headers.items()]
    if close:
        head.append(("connection", "close"))
    return head
