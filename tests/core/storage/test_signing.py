"""The REST clients sign exactly as the SDKs they stand in for: fuzzed requests (unicode and
reserved characters in keys and prefixes, continuation tokens and markers, session tokens,
ranged GETs) signed by core.storage and by botocore / azure-storage-blob (fuzz/signing.py)."""

from __future__ import annotations

import random

import pytest

from core.storage.azure import rest as azure_rest
from fuzz import signing

COUNT = 1500


@pytest.mark.parametrize("client", sorted(signing.CLIENTS))
@pytest.mark.parametrize("seed", [20261207, 1])
def test_fuzzed_requests_sign_as_the_sdk_signs_them(client: str, seed: int) -> None:
    bad = list(signing.mismatches(client, COUNT, seed))
    assert not bad, f"{len(bad)}/{COUNT} differ, e.g. {bad[0]}"


def test_the_comparison_sees_a_one_character_difference() -> None:
    request = signing.s3_request(random.Random(3))
    ours, theirs = signing.s3_signatures(request)
    assert ours == theirs
    changed = {**request, "path": request["path"] + "x"}
    assert signing.s3_signatures(changed)[0] != theirs


def test_a_ranged_azure_get_sends_its_range_as_the_sdk_does() -> None:
    assert azure_rest.ranged({"Range": "bytes=0-9", "If-Match": "0x1"}) == {
        "x-ms-range": "bytes=0-9",
        "If-Match": '"0x1"',
    }
