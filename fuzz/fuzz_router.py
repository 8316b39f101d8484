"""atheris fuzz target for the REST router (core.api.App.handle) with a real scaler model.

    pip install atheris
    python fuzz/fuzz_router.py -max_total_time=60          # libFuzzer flags pass through

Every input becomes (method, path, headers, body). A finding is: an exception escaping
App.handle, a 5xx answer (App.handle turns an unhandled bug into 500), or an error body that
is not `{"error": str}`. Not part of the default pytest run; tests/reliability/test_fuzz_smoke.py
replays a few inputs through `one_input` without atheris.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "")
PATHS = ("/v1/models/scaler:predict", "/v1/models/scaler", "/v1/models/scaler/metadata",
         "/v1/models/scaler/versions/1:predict", "/v2/models/scaler/infer",
         "/v2/models/scaler", "/v2/models/scaler/ready", "/v2/health/ready", "/v1/config",
         "/metrics", "/v2", "")
HEADERS = ("inference-header-content-length", "content-type", "x-request-id")
_app: Any = None


def app() -> Any:
    global _app
    if _app is None:
        from core.api import App
        from core.config import Settings
        from core.manager import ModelManager
        from demo import models

        root = Path(tempfile.mkdtemp(prefix="fuzz-router-"))
        models.save(models.scaler(3.0), root / "scaler" / "1", "model")
        config = root / "config.json"
        config.write_text(json.dumps({"model_config_list": [
            {"config": {"name": "scaler", "base_path": str(root / "scaler")}}]}))
        settings = Settings(config_path=str(config), cache_dir=str(root / "cache"),
                            max_request_bytes=1 << 16)
        _app = App(ModelManager.start(settings), settings)
    return _app


def one_input(data: bytes) -> None:
    from core.api import make_request

    choice = data[0] if data else 0
    rest = data[1:]
    method = METHODS[choice % len(METHODS)]
    path_seed, _, rest = rest.partition(b"\n")
    path = PATHS[(choice >> 3) % len(PATHS)] + path_seed.decode("utf-8", "replace")
    headers: dict[str, str] = {}
    if choice & 0x40:
        value, _, rest = rest.partition(b"\n")
        headers[HEADERS[len(value) % len(HEADERS)]] = value.decode("latin-1")
    response = app().handle(make_request(method, path, rest, headers))
    if response.status >= 500 and response.status != 503:
        raise AssertionError(f"{response.status} for {method} {path[:80]!r}: {response.body!r}")
    if response.status >= 400 and response.body:
        doc = json.loads(response.body)
        assert isinstance(doc, dict) and set(doc) == {"error"} and isinstance(doc["error"], str)


def main() -> None:
    import logging

    import atheris

    logging.disable(logging.CRITICAL)
    app()
    atheris.instrument_all()
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
