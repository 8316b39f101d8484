"""Index infra/azure/function_app.py with the real Azure Functions Python worker library
(azure_functions_runtime.loader.index_function_app, what the worker runs on WorkerInitRequest),
then call each indexed function as the worker's invocation path does, with
azure.functions.HttpRequest objects. Run by tests/handlers/test_azure_worker.py with the
worker's interpreter; prints one JSON object.

    python azure_worker_index.py APP_DIR "METHOD PATH [BODY]" ...
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Context:
    invocation_id: str = "worker-invocation"
    function_name: str = "serve"
    function_directory: str = ""


def main() -> int:
    import azure.functions as func
    from azure_functions_runtime.loader import index_function_app

    app_dir = Path(sys.argv[1])
    sys.path.insert(0, str(app_dir))  # the worker puts the app folder first on sys.path
    functions = index_function_app(str(app_dir / "function_app.py"))
    out: dict[str, object] = {"functions": [], "calls": []}
    for function in functions:
        out["functions"].append(
            {  # type: ignore[union-attr]
                "name": function.get_function_name(),
                "bindings": [json.loads(b) for b in function.get_raw_bindings()],
            }
        )
    (function,) = functions
    for spec in sys.argv[2:]:
        method, path, *body = spec.split(" ", 2)
        request = func.HttpRequest(
            method,
            f"https://app.azurewebsites.net{path}",
            body=(body[0] if body else "").encode(),
            headers={"content-type": "application/json"},
            route_params={"path": path[1:]},
        )
        response = function.get_user_function()(request, Context())
        out["calls"].append(
            {  # type: ignore[union-attr]
                "status": response.status_code,
                "body": response.get_body().decode(),
            }
        )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
