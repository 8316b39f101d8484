"""Azure Functions entry point (Python v2 programming model).

The Functions host indexes this file and serves the ``func.FunctionApp`` named ``app``:
one anonymous catch-all HTTP route ``{*path}`` defined in ``handlers.azure_functions``
(importing ``app`` builds it, with the models, from the environment).
Deploy this folder's ``host.json`` next to it (``routePrefix: ""``).
"""

from handlers.azure_functions import app

__all__ = ["app"]
