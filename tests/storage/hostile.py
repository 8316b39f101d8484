"""A hostile storage endpoint on 127.0.0.1 for the security tests: it refuses every request
with the provider's own error shape, whose message repeats the whole request back (request
line, headers, body), so any credential a client sends comes back in the error it reads."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any
from xml.sax.saxutils import escape


class Echo:
    """`kind`: "s3", "gs" or "az" (the error shape). On GCS paths it is also the metadata
    server (`token` is the access token it gives) and the OAuth token endpoint (refused,
    echoing the refresh request)."""

    def __init__(self, kind: str, token: str = "") -> None:
        self.kind, self.token = kind, token
        self.requests: list[str] = []
        echo = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self, body_wanted: bool = True) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                sent = self.rfile.read(length).decode("utf-8", "replace") if length else ""
                request = f"{self.requestline}\n{self.headers}\n{sent}"
                echo.requests.append(request)
                status, headers, body = echo.answer(self.path, request)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if body_wanted:
                    self.wfile.write(body)

            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self._answer()

            def do_HEAD(self) -> None:
                self._answer(body_wanted=False)

            def log_message(self, *args: Any) -> None:
                pass

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.host = f"127.0.0.1:{self.http.server_address[1]}"
        self.url = f"http://{self.host}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def answer(self, path: str, request: str) -> tuple[int, dict[str, str], bytes]:
        if path.startswith("/computeMetadata/"):
            doc = {"access_token": self.token, "expires_in": 3600, "token_type": "Bearer"}
            return 200, {"Content-Type": "application/json"}, json.dumps(doc).encode()
        if path.startswith("/token"):
            doc = {"error": "invalid_grant", "error_description": request}
            return 400, {"Content-Type": "application/json"}, json.dumps(doc).encode()
        if self.kind == "gs":
            doc = {"error": {"code": 403, "message": request}}
            return 403, {"Content-Type": "application/json"}, json.dumps(doc).encode()
        code = "AccessDenied" if self.kind == "s3" else "AuthenticationFailed"
        body = (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
                f"<Message>{escape(request)}</Message></Error>").encode()
        headers = {"Content-Type": "application/xml"}
        if self.kind == "az":
            headers["x-ms-error-code"] = code
        return 403, headers, body

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
