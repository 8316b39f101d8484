"""The atheris router target (fuzz/fuzz_router.py) imports and replays its seed corpus and a
few hostile inputs without atheris: the fuzzing itself runs outside pytest (see the module
docstring)."""

from __future__ import annotations

import json

import pytest

from fuzz import fuzz_router

HOSTILE = [
    b"",
    b"\x01",
    b"\x01\x00\n" + b"[" * 5000,
    b"\x01\x04\n{",
    b"\x81\x04\n12\n" + b"\xff" * 40,
    b"\x00\x00/../x\n",
    b"\x02" + "ß\x00☃".encode(),
    b'\x81\x04\n99999999999999999999\n{"inputs":[]}',
    b'\x01\x0c\n{"instances":[{"b64": "iVBORw0KGgo="}]}',
]


@pytest.mark.parametrize("seed", HOSTILE)
def test_replay_hostile(seed: bytes) -> None:
    fuzz_router.one_input(seed)


def test_seeds_reach_the_models() -> None:
    """Every seed is a request the server answers with success, so mutations start deep."""
    seeds = fuzz_router.seeds()
    assert len(seeds) >= 10
    for seed in seeds:
        response = fuzz_router.answer(seed)
        assert response.status == 200, (fuzz_router.decode(seed).path, response.body)
    tfs = fuzz_router.answer(seeds[0])
    assert json.loads(tfs.body) == {"predictions": [[3.0, 6.0, 9.0, 12.0]]}
