"""functions-framework's CLI with gunicorn's control socket left on: the "before" row of
handlers/cloud_run.py turning it off. Same arguments as `functions-framework`.

    python bench/ff_control_socket.py --source=handlers/cloud_run.py --target=predict
"""

from __future__ import annotations

import sys

import gunicorn.config
from functions_framework._cli import _cli


class _StandIn:
    default = False


# handlers.cloud_run imports the setting by name and turns its default on: give it this
# stand-in, so gunicorn's own ControlSocketDisable keeps its default (a socket)
gunicorn.config.ControlSocketDisable = _StandIn

if __name__ == "__main__":
    sys.exit(_cli())
