"""The atheris router target (fuzz/fuzz_router.py) imports and replays a few inputs without
atheris: the fuzzing itself runs outside pytest (see the module docstring)."""

from __future__ import annotations

import pytest

from fuzz import fuzz_router

SEEDS = [b"", b"\x01", b"\x01\n" + b'{"instances": [[1, 2, 3, 4]]}', b"\x21\n{",
         b"\x61:predict\n12\n" + b"\xff" * 40, b"\x0a/../x\n", b"\x02" + "ß\x00☃".encode(),
         b"\x41\n99999999999999999999\n{\"inputs\":[]}", b"\x01\n" + b"[" * 5000]


@pytest.mark.parametrize("seed", SEEDS)
def test_replay(seed: bytes) -> None:
    fuzz_router.one_input(seed)
