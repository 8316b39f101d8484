"""A sequence lives in the warm Lambda execution environment: successive invocations of the
same handler module (HTTP API events) keep adding to the same running sum."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

import core.api
from handlers.aws_lambda import LambdaHandler, build
from tests.core.serving.stateful.conftest import Repo, tfs_body
from tests.handlers.conftest import LambdaContext, load_event, reply_body

CLEARED = (
    "OVS_MODEL_NAME",
    "OVS_MODEL_PATH",
    "OVS_LAZY_LOAD",
    "OVS_MAX_REQUEST_BYTES",
    "OVS_BASE_PATH",
    "AWS_LAMBDA_FUNCTION_NAME",
)


@pytest.fixture
def aws(stateful_repo: Repo, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> LambdaHandler:
    for key in CLEARED:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("OVS_CONFIG_PATH", str(stateful_repo.config))
    monkeypatch.setenv("OVS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(core.api, "_default_app", None)
    return build()


def test_a_sequence_survives_across_warm_invocations(aws: LambdaHandler) -> None:
    def invoke(
        body: dict[str, Any], event: str = "powertools/apiGatewayProxyV2Event"
    ) -> tuple[int, Any]:
        reply = aws(
            load_event(event, "/v1/models/acc:predict", orjson.dumps(body), method="POST"),
            LambdaContext(),
        )
        return reply["statusCode"], orjson.loads(reply_body(reply))

    status, first = invoke(tfs_body([1, 2, 3, 4], None, 1))
    assert status == 200
    sequence_id = first["outputs"]["sequence_id"][0]
    assert first["outputs"]["sum"] == [[1, 2, 3, 4]]
    status, second = invoke(tfs_body([1, 1, 1, 1], sequence_id), "sam-cli-rendered/HttpApi")
    assert (status, second["outputs"]["sum"]) == (200, [[2, 3, 4, 5]])
    status, last = invoke(tfs_body([1, 1, 1, 1], sequence_id, 2))
    assert (status, last["outputs"]) == (200, {"sum": [[3, 4, 5, 6]], "sequence_id": [sequence_id]})
    status, gone = invoke(tfs_body([1, 1, 1, 1], sequence_id))
    assert status == 404
    assert gone == {"error": f"Sequence with provided ID does not exist - id: {sequence_id}"}
