"""handlers.http_server, the REST server of `serve`, on a real socket with raw HTTP/1.1 bytes:
framing (keep-alive, pipelining, chunked bodies, 100-continue), the errors it answers itself
(in the OVMS error shape; through App.refuse, in the shape of the route: OpenAI's under /v3),
stalled and slow clients, and the drain on shutdown."""

from __future__ import annotations

import http.client
import json
import select
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from core.api import App, Request, Response
from core.config import Settings
from core.serving.registry import ModelManager
from handlers import http_server
from tests.handlers.conftest import Repo

MAX_BODY = 1 << 20


def _handle(request: Request) -> Response:
    if request.path == "/boom":
        raise RuntimeError("a bug in the handler")
    if request.path == "/slow":
        time.sleep(float(request.query.get("s", "0.5")))
    doc = {
        "method": request.method,
        "path": request.path,
        "query": dict(request.query),
        "length": len(request.body),
        "head": request.body[:32].decode("latin-1"),
        "type": request.header("content-type"),
    }
    return Response(200, json.dumps(doc).encode())


class Running:
    def __init__(
        self,
        read_timeout: float = 5.0,
        handle: http_server.Handler = _handle,
        refuse: http_server.Refuse | None = None,
    ) -> None:
        listener = http_server.listen("127.0.0.1", 0)
        self.server = http_server.Server(
            handle,
            listener,
            threads=4,
            read_timeout=read_timeout,
            max_body=MAX_BODY,
            refuse=refuse,
        )
        self.port = self.server.port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=10)

    def stop(self) -> None:
        self.server.shutdown()
        self.thread.join(timeout=10)
        assert self.server.drain(5.0)


@pytest.fixture
def running() -> Iterator[Running]:
    server = Running()
    yield server
    server.stop()


def _responses(sock: socket.socket, count: int) -> list[tuple[int, dict[str, str], bytes]]:
    """Read `count` responses off a raw socket (Content-Length framed)."""
    buf = b""
    out = []
    while len(out) < count:
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            assert chunk, f"closed after {len(out)} responses: {buf[:200]!r}"
            buf += chunk
        head, buf = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        size = int(headers["content-length"])
        while len(buf) < size:
            buf += sock.recv(65536)
        out.append((int(lines[0].split()[1]), headers, buf[:size]))
        buf = buf[size:]
    return out


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_keep_alive_and_pipelined_requests(running: Running) -> None:
    with running.connect() as sock:
        sock.sendall(
            b"GET /a?x=1&y=%20z HTTP/1.1\r\nHost: t\r\n\r\n"
            b"POST /b%20c HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
            b"GET /c HTTP/1.1\r\nHost: t\r\n\r\n"
        )
        (s1, h1, b1), (s2, _, b2), (s3, _, b3) = _responses(sock, 3)
        assert (s1, s2, s3) == (200, 200, 200)
        assert json.loads(b1)["query"] == {"x": "1", "y": " z"}
        assert json.loads(b2) | {"type": ""} == {
            "method": "POST",
            "path": "/b c",
            "query": {},
            "length": 5,
            "head": "hello",
            "type": "",
        }
        assert json.loads(b3)["path"] == "/c"
        assert "connection" not in h1 and h1["date"].endswith("GMT")
        sock.sendall(b"GET /d HTTP/1.1\r\nHost: t\r\n\r\n")  # the connection is still open
        assert _responses(sock, 1)[0][0] == 200


def test_large_body_and_http_client(running: Running) -> None:
    body = bytes(range(256)) * 3000
    conn = http.client.HTTPConnection("127.0.0.1", running.port, timeout=10)
    for _ in range(3):
        conn.request("POST", "/infer", body=body, headers={"Content-Type": "application/x"})
        reply = conn.getresponse()
        doc = json.loads(reply.read())
        assert reply.status == 200
        assert (doc["length"], doc["type"]) == (len(body), "application/x")
        assert doc["head"] == body[:32].decode("latin-1")
    conn.close()


def test_chunked_body(running: Running) -> None:
    with running.connect() as sock:
        sock.sendall(
            b"POST /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n"
        )
        status, _, body = _responses(sock, 1)[0]
        assert status == 200
        assert json.loads(body)["head"] == "hello world"


def test_expect_100_continue(running: Running) -> None:
    with running.connect() as sock:
        sock.sendall(
            b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"
        )
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(b"abcd")
        assert json.loads(_responses(sock, 1)[0][2])["head"] == "abcd"


@pytest.mark.parametrize(
    ("raw", "status", "message"),
    [
        (b"GARBAGE\r\n\r\n", 400, "Invalid HTTP request line"),
        (b"GET / HTTP/2.0\r\n\r\n", 505, "Unsupported HTTP version: HTTP/2.0"),
        (b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n", 400, "Invalid HTTP header line"),
        (b"GET / HTTP/1.1\r\nnocolon\r\n\r\n", 400, "Invalid HTTP header line"),
        # a bare LF in an Origin that CORS echoes once made a Set-Cookie header of its own
        (b"GET / HTTP/1.1\r\nOrigin: a\nSet-Cookie: x=1\r\n\r\n", 400, "Invalid HTTP header line"),
        (b"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", 400, "Invalid HTTP header line"),
        (b"GET / HTTP/1.1\r\nX: a\0b\r\n\r\n", 400, "Invalid HTTP header line"),
        (b"GET /a\nb HTTP/1.1\r\n\r\n", 400, "Invalid HTTP request line"),
        (b"POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400, "Invalid Content-Length header"),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
            "Content-Length and Transfer-Encoding cannot both be set",
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
            501,
            "Unsupported Transfer-Encoding: gzip",
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            400,
            "Invalid chunk size in chunked body",
        ),
        (  # "²".isdigit() is True, int("²") fails: once no answer at all
            "POST / HTTP/1.1\r\nContent-Length: \xb2\r\n\r\n".encode("latin-1"),
            400,
            "Invalid Content-Length header",
        ),
        (  # a negative chunk once took the limit down by its size: 2 MB then passed it
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n-ffffffff\r\n\r\n200000\r\n",
            400,
            "Invalid chunk size in chunked body",
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n",
            400,
            "Invalid chunk size in chunked body",
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n",
            413,
            "Request body of 99999999999 bytes exceeds the limit of 1048576 bytes",
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n200000\r\n",
            413,
            "Request body exceeds the limit of 1048576 bytes",
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 1\r\nExpect: magic\r\n\r\n",
            417,
            "Unsupported Expect header: magic",
        ),
        (
            b"GET / HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n",
            431,
            "Request head exceeds 65536 bytes",
        ),
        (b"GET / HTTP/1.1\r\n" + b"X: 1\r\n" * 101 + b"\r\n", 431, "More than 100 request headers"),
    ],
)
def test_bad_requests_get_an_error_and_a_close(
    running: Running, raw: bytes, status: int, message: str
) -> None:
    with running.connect() as sock:
        sock.sendall(raw)
        got, headers, body = _responses(sock, 1)[0]
        assert (got, json.loads(body)) == (status, {"error": message})
        assert headers["connection"] == "close"
        assert _closed(sock)
    _get_ok(running)


def _get_ok(running: Running) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", running.port, timeout=10)
    conn.request("GET", "/ok")
    assert conn.getresponse().status == 200
    conn.close()


def test_handler_bug_is_a_500_and_the_server_keeps_serving(running: Running) -> None:
    with running.connect() as sock:
        sock.sendall(b"GET /boom HTTP/1.1\r\nHost: t\r\n\r\nGET /ok HTTP/1.1\r\n\r\n")
        (status, _, body), (after, _, _) = _responses(sock, 2)
        assert (status, json.loads(body)) == (500, {"error": "Internal server error: RuntimeError"})
        assert after == 200


def test_connection_close_and_http_1_0(running: Running) -> None:
    for raw in (b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", b"GET / HTTP/1.0\r\n\r\n"):
        with running.connect() as sock:
            sock.sendall(raw)
            assert _responses(sock, 1)[0][1]["connection"] == "close"
            assert _closed(sock)
    with running.connect() as sock:  # HTTP/1.0 that asks for keep-alive keeps it
        sock.sendall(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" * 2)
        assert [r[0] for r in _responses(sock, 2)] == [200, 200]


def test_head_has_no_body(running: Running) -> None:
    with running.connect() as sock:
        sock.sendall(b"HEAD /x HTTP/1.1\r\nHost: t\r\n\r\nGET /y HTTP/1.1\r\nHost: t\r\n\r\n")
        buf = b""
        while buf.count(b"\r\n\r\n") < 2:
            buf += sock.recv(65536)
        first, rest = buf.split(b"\r\n\r\n", 1)
        assert b"Content-Length: " in first
        assert rest.startswith(b"HTTP/1.1 200 OK")  # the GET's response follows the head


def test_stalled_clients_are_dropped_after_the_read_timeout() -> None:
    read_timeout = 0.5
    running = Running(read_timeout=read_timeout)
    try:
        with running.connect() as head, running.connect() as body:
            head.sendall(b"GET / HTTP/1.1\r\nHost: t")
            body.sendall(b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")
            started = time.monotonic()
            _get_ok(running)  # others are served meanwhile
            round_trip = time.monotonic() - started
            started = time.monotonic()
            for sock, part in ((head, "head"), (body, "body")):
                status, headers, reply = _responses(sock, 1)[0]
                assert (status, headers["connection"]) == (408, "close")
                assert json.loads(reply) == {
                    "error": f"Request {part} not received in time (--rest_read_timeout_seconds)"
                }
                assert _closed(sock)
            # dropped at the read timeout, not at a default or never (a busy host: slack)
            assert time.monotonic() - started < read_timeout + 20 * round_trip + 2.0
    finally:
        running.stop()


def test_shutdown_refuses_new_closes_idle_and_drains_in_flight() -> None:
    running = Running()
    idle = running.connect()
    idle.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
    assert _responses(idle, 1)[0][0] == 200
    busy = running.connect()
    busy.sendall(b"GET /slow?s=0.6 HTTP/1.1\r\nHost: t\r\n\r\n")
    time.sleep(0.2)  # the slow request is in the handler
    running.server.shutdown()
    running.thread.join(timeout=5)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", running.port), timeout=1)
    assert _closed(idle)
    status, headers, _ = _responses(busy, 1)[0]  # finished, then closed
    assert (status, headers["connection"]) == (200, "close")
    assert running.server.drain(5.0)
    idle.close()
    busy.close()


def test_drain_reports_requests_still_running() -> None:
    running = Running()
    with running.connect() as busy:
        busy.sendall(b"GET /slow?s=1.5 HTTP/1.1\r\nHost: t\r\n\r\n")
        time.sleep(0.2)
        running.server.shutdown()
        running.thread.join(timeout=5)
        assert not running.server.drain(0.2)
        assert running.server.drain(5.0)


# -- slow clients: the whole head is due within the read timeout (nginx's client_header_timeout)


def _trickle(sock: socket.socket, data: bytes, every: float, within: float) -> float | None:
    """Send `data` a byte every `every` seconds until the server answers; the seconds that
    took, or None when `within` seconds passed (or `data` ran out) without an answer."""
    started = time.monotonic()
    for byte in data:
        if select.select([sock], [], [], every)[0]:
            return time.monotonic() - started
        if time.monotonic() - started > within:
            return None
        sock.send(bytes([byte]))
    return None


def test_a_head_sent_a_byte_at_a_time_gets_a_408_at_the_read_timeout() -> None:
    """Slowloris: the read timeout once counted only silence, so a client sending its head a
    byte every 0.1 s held its connection (and thread) forever; 1,024 of them had every other
    client refused with a 503."""
    read_timeout = 1.0
    running = Running(read_timeout=read_timeout)
    try:
        with running.connect() as sock:
            head = b"GET / HTTP/1.1\r\nHost: t\r\nX-Pad: " + b"a" * 200 + b"\r\n\r\n"  # 20 s
            took = _trickle(sock, head, every=0.1, within=read_timeout + 3.0)
            assert took is not None, "no answer: the slow head still holds its connection"
            assert read_timeout / 2 < took < read_timeout + 2.0
            status, headers, reply = _responses(sock, 1)[0]
            assert (status, headers["connection"]) == (408, "close")
            assert json.loads(reply) == {"error": http_server.HEAD_TIMEOUT}
            assert _closed(sock)
        _get_ok(running)
    finally:
        running.stop()


def test_a_new_connection_that_sends_nothing_is_closed_at_the_read_timeout() -> None:
    """Not after the 75 s keep-alive wait: that let idle sockets fill the server as well."""
    read_timeout = 0.5
    running = Running(read_timeout=read_timeout)
    try:
        with running.connect() as sock:
            sock.settimeout(read_timeout + 3.0)
            started = time.monotonic()
            assert sock.recv(1) == b""  # closed without an answer: nothing was asked
            assert time.monotonic() - started < read_timeout + 2.0
    finally:
        running.stop()


def test_a_kept_alive_connection_times_each_head_from_its_first_byte() -> None:
    read_timeout = 0.5
    running = Running(read_timeout=read_timeout)
    try:
        with running.connect() as sock:
            sock.sendall(b"GET /a HTTP/1.1\r\nHost: t\r\n\r\n")
            assert _responses(sock, 1)[0][0] == 200
            time.sleep(read_timeout * 2)  # idle between requests: the keep-alive wait
            sock.sendall(b"GET /b HTTP/1.1\r\nHost: t\r\n")
            time.sleep(read_timeout / 2)  # a head in two parts, within the read timeout
            sock.sendall(b"\r\n")
            status, headers, _ = _responses(sock, 1)[0]
            assert status == 200 and "connection" not in headers
    finally:
        running.stop()


# -- the server's own errors through App.refuse: the shape of the route, and CORS ----------------


@pytest.fixture(scope="module")
def app_server(repo: Repo) -> Iterator[Running]:
    settings = Settings(
        config_path=str(repo.config), cache_dir=str(repo.cache), max_request_bytes=MAX_BODY
    )
    app = App(ModelManager.start(settings), settings)
    server = Running(read_timeout=0.5, handle=app.handle, refuse=app.refuse)
    yield server
    server.stop()


REFUSED = [  # %s: the path
    (b"POST %s HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n", 413),
    (b"POST %s HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n200000\r\n", 413),
    (b"POST %s HTTP/1.1\r\nBad Header: x\r\n\r\n", 400),
    (b"POST %s HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    (b"POST %s HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
    (b"POST %s HTTP/1.1\r\nContent-Length: 1\r\nExpect: magic\r\n\r\n", 417),
    (b"POST %s HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc", 408),  # the body stalls
    (b"POST %s HTTP/1.1\r\nHost: t\r\n", 408),  # the head stalls
    (b"POST %s HTTP/1.1\r\n" + b"X: 1\r\n" * 101 + b"\r\n", 431),
    (b"POST %s HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n", 431),
    (b"POST %s HTTP/2.0\r\n\r\n", 505),
    (b"POST %s HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
]
ROUTES = [  # (path, in the OpenAI shape)
    ("/v3/embeddings", True),
    ("/v1/embeddings", True),
    ("/v3/chat/completions", True),  # not served: still the OpenAI API's
    ("/v1/models/scaler:predict", False),
]


@pytest.mark.parametrize(("raw", "status"), REFUSED)
def test_the_servers_own_errors_take_the_shape_of_the_route(
    app_server: Running, raw: bytes, status: int
) -> None:
    """An OpenAI client parses {"error": {"message", "type", "param", "code"}}: a 413 refused
    from the Content-Length, a framing error or a timeout once came as {"error": "..."}."""
    for path, openai in ROUTES:
        with app_server.connect() as sock:
            sock.sendall(raw % path.encode())
            got, headers, body = _responses(sock, 1)[0]
        error = json.loads(body)["error"]
        assert got == status, (path, body)
        if openai:
            kind = "invalid_request_error" if status < 500 else "server_error"
            assert error == {"message": error["message"], "type": kind, "param": None, "code": None}
        else:
            assert isinstance(error, str), (path, body)
        assert headers["access-control-allow-origin"] == "*", path  # as the app's own answers


def test_the_openai_client_reads_the_servers_own_errors(app_server: Running) -> None:
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(
        base_url=f"http://127.0.0.1:{app_server.port}/v3", api_key="unused", max_retries=0
    )
    with pytest.raises(openai.APIStatusError) as refused:  # refused from its Content-Length
        client.embeddings.create(model="minilm", input="word " * (MAX_BODY // 4))
    assert refused.value.status_code == 413
    assert refused.value.body["type"] == "invalid_request_error"
    assert refused.value.body["message"].startswith("Request body of ")
    with pytest.raises(openai.NotFoundError) as missing:  # a route this server does not serve
        client.chat.completions.create(model="scaler", messages=[{"role": "user", "content": "a"}])
    assert missing.value.body == {
        "message": "Invalid URL (POST /v3/chat/completions)",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
