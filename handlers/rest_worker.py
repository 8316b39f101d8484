"""gunicorn's gthread worker, hardened against slow clients (found by
tests/reliability/test_faults.py::test_slow_clients_cannot_hold_every_thread).

Two gaps in gthread (gunicorn 27): a thread that took a connection blocks on the rest of the
headers and on the body with no timeout, so `threads` clients that stop halfway (slowloris)
hold every thread; and a finished connection is closed "gracefully" on the worker's main
thread, lingering up to 2 s for the peer's FIN, so every stalled client also freezes accept()
and keep-alive handling for 2 s. Here each blocking read or write on a client socket gives up
after `read_timeout` seconds without progress (a stalled header closes the connection, a
stalled body is answered 408 by handlers.wsgi), and the lingering close runs off the main
thread (at most `MAX_LINGERING` at once; beyond that the socket is closed at once).

And on SIGTERM gthread only stops polling its listening socket: the kernel keeps completing
handshakes into the backlog, so new clients connect and hang until the worker exits. Here the
listener is closed as soon as the drain starts, so new connections are refused.
"""

from __future__ import annotations

import logging
import threading

from gunicorn import util
from gunicorn.workers import gthread

MAX_LINGERING = 64
_lingering = threading.BoundedSemaphore(MAX_LINGERING)


def _linger_and_close(sock: object) -> None:
    try:
        util.close_graceful(sock)
    finally:
        _lingering.release()


class Worker(gthread.ThreadWorker):
    read_timeout: float = 30.0  # set through configure() before the worker forks

    def init_process(self) -> None:
        timeout = self.read_timeout

        class TimedConn(gthread.TConn):
            def init(self) -> None:  # runs before each request is parsed, keep-alive included
                super().init()
                if timeout > 0:
                    self.sock.settimeout(timeout)

            def close(self, graceful: bool = False) -> None:
                if not graceful or not _lingering.acquire(blocking=False):
                    util.close(self.sock)
                    return
                threading.Thread(target=_linger_and_close, args=(self.sock,),
                                 name="linger", daemon=True).start()

        gthread.TConn = TimedConn  # this worker process only: accept() builds TimedConn
        self.log.error_log.addFilter(_quiet_timeouts)
        super().init_process()

    def set_accept_enabled(self, enabled: bool) -> None:
        super().set_accept_enabled(enabled)
        if not enabled and not self.alive:  # draining after SIGTERM: refuse new connections
            for listener in self.sockets:
                listener.close()


def _quiet_timeouts(record: logging.LogRecord) -> bool:
    """gthread logs a read timeout as "Socket error" with a traceback at ERROR; a stalled
    client is the client's problem: one WARNING line, no traceback."""
    if record.exc_info and isinstance(record.exc_info[1], TimeoutError):
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.msg, record.args = "Client stalled mid-request; closed after the read timeout", ()
        record.exc_info = record.exc_text = None
    return True


def configure(read_timeout: float) -> str:
    """Set the timeout and return the dotted `worker_class` for gunicorn."""
    Worker.read_timeout = read_timeout
    return f"{__name__}.Worker"
