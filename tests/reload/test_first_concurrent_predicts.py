"""Found by the live reload suite: a fresh process whose first predicts arrive on several
threads at once could deadlock inside OpenVINO's numpy bindings (a C++ static-init guard vs
the GIL), and the server stopped answering. Each child process reads a model from disk and
fires its very first inferences from 64 threads together; all must finish. (Without the fix a
lone child hangs about one run in four; with 12 at once this test failed every other run.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.reload.helpers import put_version

CHILD = """
import sys, threading
import numpy as np
from core.runtime.ov_core import ov_core

core = ov_core()  # as ModelVersion._build gets it: the fix lives there
compiled = core.compile_model(core.read_model(sys.argv[1]), "CPU", {"PERFORMANCE_HINT": "LATENCY"})
requests = [compiled.create_infer_request() for _ in range(64)]
go = threading.Event()

def first_predict(request) -> None:
    go.wait()
    request.infer({"x": np.ones((1, 4), np.float32)}, share_inputs=True, share_outputs=False)

threads = [threading.Thread(target=first_predict, args=(r,)) for r in requests]
for thread in threads:
    thread.start()
go.set()
for thread in threads:
    thread.join()
"""
CHILDREN = 12
TIMEOUT_S = 20.0


def test_first_predicts_from_many_threads_do_not_deadlock(tmp_path: Path) -> None:
    put_version(tmp_path / "m", 1)
    root = Path(__file__).resolve().parents[2]
    model = tmp_path / "m" / "1" / "model.xml"  # read from disk, as a server does
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(model)],
            cwd=root,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for _ in range(CHILDREN)
    ]
    hung = 0
    for child in children:
        try:
            _, err = child.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            hung += 1
        else:
            assert child.returncode == 0, err.decode(errors="replace")[-2000:]
    assert hung == 0, f"{hung} of {CHILDREN} processes deadlocked on their first predicts"
