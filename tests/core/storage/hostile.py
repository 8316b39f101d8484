"""A hostile storage endpoint on 127.0.0.1 for the security tests: it refuses every request
with the provider's own error shape, whose message repeats the whole request back (request
line, headers, body), so any credential a client sends comes back in the error it reads."""

from __future__ import annotations

import json
from typing import Any
from xml.sax.saxutils import escape

from tests.core.storage.helpers import Answer, Front


class Echo(Front):
    """`kind`: "s3", "gs" or "az" (the error shape). On GCS paths it is also the metadata
    server (`token` is the access token it gives) and the OAuth token endpoint (refused,
    echoing the refresh request). `requests`: every request as it came."""

    def __init__(self, kind: str, token: str = "") -> None:
        self.kind, self.token = kind, token
        self.requests: list[str] = []
        super().__init__()
        self.url = f"http://{self.host}"

    def answer(self, request: Any) -> Answer:
        length = int(request.headers.get("Content-Length") or 0)
        sent = request.rfile.read(length).decode("utf-8", "replace") if length else ""
        echoed = f"{request.requestline}\n{request.headers}\n{sent}"
        self.requests.append(echoed)
        return self.refuse(request.path, echoed)

    def refuse(self, path: str, echoed: str) -> Answer:
        if path.startswith("/computeMetadata/"):
            doc = {"access_token": self.token, "expires_in": 3600, "token_type": "Bearer"}
            return 200, {"Content-Type": "application/json"}, json.dumps(doc).encode()
        if path.startswith("/token"):
            doc = {"error": "invalid_grant", "error_description": echoed}
            return 400, {"Content-Type": "application/json"}, json.dumps(doc).encode()
        if self.kind == "gs":
            doc = {"error": {"code": 403, "message": echoed}}
            return 403, {"Content-Type": "application/json"}, json.dumps(doc).encode()
        code = "AccessDenied" if self.kind == "s3" else "AuthenticationFailed"
        body = (
            f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
            f"<Message>{escape(echoed)}</Message></Error>"
        ).encode()
        headers = {"Content-Type": "application/xml"}
        if self.kind == "az":
            headers["x-ms-error-code"] = code
        return 403, headers, body
