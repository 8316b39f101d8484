"""The REST server of `serve`: HTTP/1.1 on threads, in the one process that holds the models.

Why not gunicorn (used before 2026-12-03): its arbiter imports itself and forks a worker
before the first model loads, and its gthread worker passes each keep-alive request between
threads and through several copying readers: ~1 ms per 600 KB request on 2 cores, against
~0.15 ms here (bench/RESULTS.md). Here each connection has its own thread and each body is
read straight into one buffer, so a slow or stalled client holds only its own thread.

Limits: a request head of MAX_HEAD bytes (431); a body over `max_body` is refused from its
Content-Length before it is read (413); the whole head must arrive within `read_timeout`
seconds, counted from the accept for a new connection and from the first byte on a kept-alive
one (408, as nginx's client_header_timeout: a client sending its head a byte at a time holds
its connection no longer); a body may pause `read_timeout` seconds between reads (408); a new
connection that sends nothing is closed after `read_timeout` seconds, an idle keep-alive one
after KEEPALIVE_SECONDS; at most MAX_CONNECTIONS at once (503). The errors the server answers
itself take the shape of the route (`refuse`: App.refuse, OpenAI's under /v3). `threads`
requests run the handler at once; the rest wait. `shutdown()` (the SIGTERM handler) closes the
listener at once, so new connections are refused, and closes idle connections; `drain()` waits
for the requests in flight.
"""

from __future__ import annotations

import contextlib
import email.utils
import logging
import re
import selectors
import socket
import threading
import time
from collections.abc import Callable, Mapping
from urllib.parse import parse_qsl, unquote

from core.api import Request, Response, reason_phrase, refusal

MAX_HEAD = 64 * 1024
MAX_HEADERS = 100
MAX_CONNECTIONS = 1024
KEEPALIVE_SECONDS = 75.0
_RECV = 256 * 1024
_BODY_STEP = 1 << 20
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
# RFC 9110 5.5: a bare CR or LF, or a NUL, in a field value is refused (an echoed Origin with a
# bare LF once became a header of its own in the response)
_CONTROL = re.compile(rb"[\r\n\0]")

log = logging.getLogger("ov_serverless.http")
Handler = Callable[[Request], Response]
# (status, message, path, request headers) -> the answer, in the route's error shape
Refuse = Callable[[int, str, str, Mapping[str, str]], Response]
HEAD_TIMEOUT = "Request head not received in time (--rest_read_timeout_seconds)"
BODY_TIMEOUT = "Request body not received in time (--rest_read_timeout_seconds)"


class HttpError(Exception):
    """A request the server answers itself before closing."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.path = ""  # once the request line is read
        self.request_headers: Mapping[str, str] = {}  # once the head is read


def _ovms_shape(status: int, message: str, path: str, headers: Mapping[str, str]) -> Response:
    return refusal(status, message)


def listen(host: str, port: int) -> socket.socket:
    """The listening socket; bound before the models load, so clients queue meanwhile."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host.strip("[]"), port), family=family, backlog=1024)
    sock.setblocking(False)
    return sock


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
        self._slots = threading.BoundedSemaphore(threads)
        self._read_timeout = read_timeout or None  # 0: wait forever
        self._max_body = max_body
        self._wake_r, self._wake_w = socket.socketpair()
        self._lock = threading.Condition()
        self._stopping = False
        self._open = 0
        self._busy = 0
        self._idle: set[socket.socket] = set()

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    # -- accepting -----------------------------------------------------------------------------

    def serve_forever(self) -> None:
        """Accept until shutdown(); then refuse new connections and close the idle ones."""
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while not self._stopping:
                for key, _ in selector.select():
                    if key.fileobj is self._listener:
                        self._accept()
        self._listener.close()
        with self._lock:
            for sock in self._idle:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)  # its thread's recv() returns b""

    def shutdown(self) -> None:
        """Stop accepting (safe from a signal handler or any thread)."""
        self._stopping = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def drain(self, grace: float) -> bool:
        """Wait up to `grace` seconds for the requests in flight; False if some are left."""
        deadline = time.monotonic() + grace
        with self._lock:
            while self._busy and (left := deadline - time.monotonic()) > 0:
                self._lock.wait(left)
            return not self._busy

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. out of file descriptors: keep serving the rest
                log.warning("accept failed: %s", exc)
                return
            with self._lock:
                crowded = self._open >= MAX_CONNECTIONS
                if not crowded:
                    self._open += 1
            if crowded:
                _turn_away(sock)
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(
                target=self._connection, args=(sock,), name="rest", daemon=True
            ).start()

    # -- one connection ------------------------------------------------------------------------

    def _connection(self, sock: socket.socket) -> None:
        buf = bytearray()
        started = time.monotonic()  # the first head's clock runs from the accept
        wait = min(self._read_timeout or KEEPALIVE_SECONDS, KEEPALIVE_SECONDS)
        try:
            while self._next_request(sock, buf, wait):
                try:
                    keep = self._exchange(sock, buf, started)
                finally:
                    with self._lock:
                        self._busy -= 1
                        self._lock.notify_all()
                if not keep:
                    break
                wait = KEEPALIVE_SECONDS
                started = 0.0  # a kept-alive connection's: from the next request's first byte
        except OSError:  # the client went away: nothing to answer
            pass
        except Exception:  # a bug here must cost one connection, never the server
            log.exception("REST connection failed")
        finally:
            sock.close()
            with self._lock:
                self._open -= 1

    def _next_request(self, sock: socket.socket, buf: bytearray, wait: float) -> bool:
        """Wait up to `wait` seconds (idle, closable by a drain) for the first bytes of the
        next request; True when they came, counted as busy until the response is sent."""
        with self._lock:
            if self._stopping:
                return False
            if not buf:
                self._idle.add(sock)
        try:
            if not buf:
                sock.settimeout(wait)
                chunk = sock.recv(_RECV)
                buf += chunk
        except OSError:
            pass
        finally:
            with self._lock:
                self._idle.discard(sock)
                self._busy += bool(buf)
        return bool(buf)

    def _exchange(self, sock: socket.socket, buf: bytearray, started: float) -> bool:
        """Read one request (its head due `read_timeout` seconds after `started`, or after
        now when 0), answer it; True to keep the connection open."""
        timeout = self._read_timeout
        deadline = (started or time.monotonic()) + timeout if timeout else None
        if deadline is None:  # else _read_head sets the time left before each read
            sock.settimeout(None)
        try:
            request, keep = self._read_request(sock, buf, deadline)
        except HttpError as exc:
            sock.settimeout(timeout)
            response = self._refuse(exc.status, exc.message, exc.path, exc.request_headers)
            _send(sock, response, head_only=False, keep=False)
            return False
        if request is None:
            return False
        with self._slots:
            response = self._answer(request)
        keep = keep and not self._stopping
        _send(sock, response, head_only=request.method == "HEAD", keep=keep)
        return keep

    def _answer(self, request: Request) -> Response:
        try:
            return self._handle(request)
        except Exception as exc:  # App.handle answers its own errors; this is a last guard
            log.exception("REST handler failed for %s %s", request.method, request.path[:200])
            message = f"Internal server error: {type(exc).__name__}"
            return self._refuse(500, message, request.path, request.headers)

    def _read_request(
        self, sock: socket.socket, buf: bytearray, deadline: float | None
    ) -> tuple[Request | None, bool]:
        """One request off the socket; an HttpError carries the path and the headers read."""
        head: bytes | None = None
        headers: dict[str, str] = {}
        try:
            head = _read_head(sock, buf, deadline)
            if head is None:
                return None, False
            sock.settimeout(self._read_timeout)  # the body: a pause between reads, each
            method, target, version, headers = _parse_head(head)
            expect = headers.get("expect", "").lower()
            if expect and expect != "100-continue":
                raise HttpError(417, f"Unsupported Expect header: {expect[:100]}")
            body = self._read_body(
                sock, buf, headers, continue_first=bool(expect) and version == "HTTP/1.1"
            )
        except HttpError as exc:
            exc.path = _path_of(head if head is not None else _first_line(buf))
            exc.request_headers = headers
            raise
        path, _, query = target.partition("?")
        request = Request(
            method, unquote(path), dict(parse_qsl(query, keep_blank_values=True)), headers, body
        )
        return request, _keep_alive(version, headers.get("connection", ""))

    def _read_body(
        self, sock: socket.socket, buf: bytearray, headers: dict[str, str], continue_first: bool
    ) -> bytes:
        chunked = headers.get("transfer-encoding")
        length_text = headers.get("content-length")
        if chunked is not None:
            if length_text is not None:
                raise HttpError(400, "Content-Length and Transfer-Encoding cannot both be set")
            if chunked.lower() != "chunked":
                raise HttpError(501, f"Unsupported Transfer-Encoding: {chunked[:100]}")
        elif length_text is None or length_text == "0":
            return b""
        elif not (length_text.isascii() and length_text.isdigit()):  # "²".isdigit() is True
            raise HttpError(400, "Invalid Content-Length header")
        elif int(length_text) > self._max_body:
            raise HttpError(
                413,
                f"Request body of {length_text} bytes exceeds the limit of {self._max_body} bytes",
            )
        if continue_first:
            sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        try:
            if chunked is not None:
                return _read_chunked(sock, buf, self._max_body)
            return _read_exact(sock, buf, int(length_text or 0))
        except TimeoutError:
            raise HttpError(408, BODY_TIMEOUT) from None


# -- HTTP/1.1 framing ---------------------------------------------------------------------------


def _read_head(sock: socket.socket, buf: bytearray, deadline: float | None) -> bytes | None:
    """The request head, due by `deadline` (time.monotonic(); None: no limit) as a whole,
    however the client spaces its bytes; None when the client closes first."""
    while (end := _head_end(buf)) < 0:
        if len(buf) > MAX_HEAD:
            raise HttpError(431, f"Request head exceeds {MAX_HEAD} bytes")
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise HttpError(408, HEAD_TIMEOUT)
            sock.settimeout(left)
        try:
            chunk = sock.recv(_RECV)
        except TimeoutError:
            raise HttpError(408, HEAD_TIMEOUT) from None
        if not chunk:
            return None
        buf += chunk
    if end > MAX_HEAD:
        raise HttpError(431, f"Request head exceeds {MAX_HEAD} bytes")
    head = bytes(buf[:end])
    del buf[: end + 4]
    return head


def _head_end(buf: bytearray) -> int:
    """Where the head in `buf` ends (-1: not yet); RFC 9112 2.2: empty lines before a
    request are dropped."""
    while buf.startswith(b"\r\n"):
        del buf[:2]
    return buf.find(b"\r\n\r\n")


def _first_line(buf: bytearray) -> bytes:
    """The request line of a head still being read, once complete (else b"")."""
    end = buf.find(b"\r\n")
    return bytes(buf[:end]) if end >= 0 else b""


def _path_of(head: bytes) -> str:
    """The path of a head's request line, for the shape of an error; "" when unreadable."""
    parts = head.split(b"\r\n", 1)[0].split(b" ")
    if len(parts) != 3 or _CONTROL.search(parts[1]):
        return ""
    return unquote(_origin_form(parts[1].decode("latin-1")).partition("?")[0])


def _origin_form(target: str) -> str:
    """The target as a path (and query): the absolute form keeps its path."""
    if target.startswith(("http://", "https://")):
        return "/" + target.split("/", 3)[3] if target.count("/") >= 3 else "/"
    return target


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    lines = head.split(b"\r\n")
    if len(lines) > MAX_HEADERS + 1:
        raise HttpError(431, f"More than {MAX_HEADERS} request headers")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[1] or _CONTROL.search(lines[0]):
        raise HttpError(400, "Invalid HTTP request line")
    method, target, version = (part.decode("latin-1") for part in parts)
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise HttpError(505, f"Unsupported HTTP version: {version[:20]}")
    target = _origin_form(target)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip() or b" " in name or _CONTROL.search(line):
            raise HttpError(400, "Invalid HTTP header line")
        key, text = name.decode("latin-1").lower(), value.strip(b" \t").decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return method.upper(), target, version, headers


def _keep_alive(version: str, connection: str) -> bool:
    tokens = {token.strip().lower() for token in connection.split(",")}
    return "keep-alive" in tokens if version == "HTTP/1.0" else "close" not in tokens


def _read_exact(sock: socket.socket, buf: bytearray, size: int) -> bytes:
    """`size` body bytes; memory grows as they arrive, not from what Content-Length claims."""
    first = bytes(buf[:size])
    del buf[:size]
    parts = [first]
    got = len(first)
    while got < size:
        chunk = sock.recv(min(size - got, _BODY_STEP))
        if not chunk:
            raise ConnectionError("client closed mid-body")
        parts.append(chunk)
        got += len(chunk)
    return first if len(parts) == 1 else b"".join(parts)


def _read_line(sock: socket.socket, buf: bytearray) -> bytes:
    while (end := buf.find(b"\r\n")) < 0:
        if len(buf) > 4096:
            raise HttpError(400, "Invalid chunked body")
        chunk = sock.recv(_RECV)
        if not chunk:
            raise ConnectionError("client closed mid-body")
        buf += chunk
    line = bytes(buf[:end])
    del buf[: end + 2]
    return line


def _read_chunked(sock: socket.socket, buf: bytearray, limit: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        size = _chunk_size(_read_line(sock, buf))
        if size == 0:
            while _read_line(sock, buf):  # trailers, up to the empty line
                pass
            return b"".join(parts)
        total += size
        if total > limit:
            raise HttpError(413, f"Request body exceeds the limit of {limit} bytes")
        parts.append(_read_exact(sock, buf, size))
        if _read_line(sock, buf):
            raise HttpError(400, "Invalid chunked body")


def _chunk_size(line: bytes) -> int:
    """RFC 9112 7.1: hex digits only. int(x, 16) alone would also take "-5" (a negative size,
    which undercounts the body against its limit), "0x5", "+5" and "1_0"."""
    text = line.split(b";")[0].strip(b" \t")
    if _CHUNK_SIZE.fullmatch(text) is None:
        raise HttpError(400, "Invalid chunk size in chunked body")
    return int(text, 16)


def _send(sock: socket.socket, response: Response, head_only: bool, keep: bool) -> None:
    lines = [
        f"HTTP/1.1 {response.status} {reason_phrase(response.status)}",
        f"Date: {_date()}",
        "Server: ov-serverless",
    ]
    if response.status != 204:  # RFC 9110: a 204 has no Content-Length
        lines.append(f"Content-Length: {len(response.body)}")
    lines += [f"{name.title()}: {value}" for name, value in response.headers.items()]
    if not keep:
        lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    if head_only:
        sock.sendall(head)
    elif len(response.body) < 65536:
        sock.sendall(head + response.body)
    else:  # a large body is not copied just to prepend the head
        sock.sendall(head)
        sock.sendall(response.body)


def _turn_away(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.settimeout(1.0)
        _send(sock, refusal(503, "Too many open connections"), False, False)
    sock.close()


_date_cache: tuple[int, str] = (0, "")


def _date() -> str:
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, email.utils.formatdate(now, usegmt=True))
    return _date_cache[1]
