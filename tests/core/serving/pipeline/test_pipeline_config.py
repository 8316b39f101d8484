"""Pipeline validation (each error names the pipeline and node), custom node lifecycle on
reload/unload, and a pipeline that follows its model to a new version."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from core.config import Settings
from core.errors import ConfigError
from core.serving.registry import ModelManager
from demo.models import save, scaler
from tests.core.serving.pipeline.conftest import Repo
from tests.core.serving.pipeline.helpers import (
    NODES,
    app_for,
    call,
    chain,
    custom_node,
    doc,
    error,
    library,
    model_node,
    pipeline,
    src,
    tfs_columns,
    write_config,
)

MODELS = [{"name": n, "base_path": n} for n in ("scaler", "two_inputs")]
LIBRARIES = {
    n: library(n)
    for n in ("offset", "wrong_types", "no_execute", "no_info", "split", "liar", "uneven")
}
LIBRARIES["missing"] = "/nonexistent/missing_node.py"


def _models(repo: Repo) -> list[dict[str, Any]]:
    return [{**m, "base_path": str(repo.root / m["base_path"])} for m in MODELS]


def _scale(name: str = "scale", source: dict[str, str] | None = None) -> dict[str, Any]:
    return model_node(name, "scaler", {"x": source or src("request", "x")}, ["y"])


INVALID: dict[str, tuple[dict[str, Any], list[str]]] = {
    "unknown_model": (
        pipeline(
            "unknown_model",
            ["x"],
            [model_node("ghost_model", "nope", {"x": src("request", "x")}, ["y"])],
            {"y": src("ghost_model", "y")},
        ),
        ["node ghost_model", "unknown model 'nope'"],
    ),
    "cycle": (
        pipeline(
            "cycle",
            ["x"],
            [_scale("first", src("second", "y")), _scale("second", src("first", "y"))],
            {"y": src("second", "y")},
        ),
        ["pipeline cycle", "first, second", "cycle"],
    ),
    "unconnected": (
        pipeline(
            "unconnected",
            ["x"],
            [model_node("pair", "two_inputs", {"a": src("request", "x")}, ["sum"])],
            {"sum": src("pair", "sum")},
        ),
        ["node pair", "input b is not connected"],
    ),
    "unknown_node": (
        pipeline(
            "unknown_node",
            ["x"],
            [_scale(), _scale("again", src("ghost", "y"))],
            {"y": src("again", "y")},
        ),
        ["node again", "unknown node 'ghost'"],
    ),
    "unknown_output": (
        pipeline(
            "unknown_output",
            ["x"],
            [_scale(), _scale("again", src("scale", "nothing"))],
            {"y": src("again", "y")},
        ),
        ["node again", "node scale has no output 'nothing'"],
    ),
    "dtype_mismatch": (
        pipeline(
            "dtype_mismatch",
            ["x"],
            [
                custom_node("cast", "wrong_types", {"x": src("request", "x")}, ["ints", "wide"]),
                _scale("after", src("cast", "ints")),
            ],
            {"y": src("after", "y")},
        ),
        ["node after", "input x expects FP32", "produces INT32"],
    ),
    "shape_mismatch": (
        pipeline(
            "shape_mismatch",
            ["x"],
            [
                custom_node("cast", "wrong_types", {"x": src("request", "x")}, ["ints", "wide"]),
                _scale("after", src("cast", "wide")),
            ],
            {"y": src("after", "y")},
        ),
        ["node after", "expects shape (-1,4)", "produces (-1,5)"],
    ),
    "no_execute": (
        pipeline(
            "no_execute",
            ["x"],
            [custom_node("lazy", "no_execute", {"y": src("request", "x")}, ["y"])],
            {"y": src("lazy", "y")},
        ),
        ["node lazy", "no_execute", "defines no execute()"],
    ),
    "missing_library_file": (
        pipeline(
            "missing_library_file",
            ["x"],
            [custom_node("gone", "missing", {"y": src("request", "x")}, ["y"])],
            {"y": src("gone", "y")},
        ),
        ["node gone", "failed to load"],
    ),
    "no_info": (
        pipeline(
            "no_info",
            ["x"],
            [custom_node("vague", "no_info", {"y": src("request", "x")}, ["y"])],
            {"y": src("vague", "y")},
        ),
        ["node vague", "inputs_info and outputs_info"],
    ),
    "unknown_library": (
        pipeline(
            "unknown_library",
            ["x"],
            [custom_node("where", "nolib", {"y": src("request", "x")}, ["y"])],
            {"y": src("where", "y")},
        ),
        ["node where", "unknown custom node library 'nolib'"],
    ),
    "undeclared_request_input": (
        pipeline(
            "undeclared_request_input",
            ["x"],
            [
                _scale(),
                model_node(
                    "pair",
                    "two_inputs",
                    {"a": src("scale", "y"), "b": src("request", "z")},
                    ["sum"],
                ),
            ],
            {"sum": src("pair", "sum")},
        ),
        ["node pair", "request has no input 'z'"],
    ),
    "two_demultiplexers": (
        pipeline(
            "two_demultiplexers",
            ["x"],
            [
                custom_node(
                    "one",
                    "split",
                    {"x": src("request", "x")},
                    ["items"],
                    params={"count": "2"},
                    demultiply_count=2,
                ),
                custom_node(
                    "two",
                    "split",
                    {"x": src("request", "x")},
                    ["items"],
                    params={"count": "2"},
                    demultiply_count=2,
                ),
            ],
            {"a": src("one", "items"), "b": src("two", "items")},
        ),
        ["only one demultiplexer"],
    ),
    # OVMS PIPELINE_NODE_GATHER_FROM_NOT_DEMULTIPLEXER (it loaded, gathering nothing)
    "gather_from_plain_node": (
        pipeline(
            "gather_from_plain_node",
            ["x"],
            [_scale(), {**_scale("again", src("scale", "y")), "gather_from_node": "scale"}],
            {"y": src("again", "y")},
        ),
        ["node again", "gather_from_node", "node scale", "is not a demultiplexer"],
    ),
    # OVMS PIPELINE_MODEL_INPUT_CONNECTED_TO_MULTIPLE_DATA_SOURCES (the last source won)
    "input_fed_twice": (
        pipeline(
            "input_fed_twice",
            ["x"],
            [
                _scale(),
                {
                    **model_node("pair", "two_inputs", {"b": src("request", "x")}, ["sum"]),
                    "inputs": [
                        {"a": src("request", "x")},
                        {"a": src("scale", "y")},
                        {"b": src("request", "x")},
                    ],
                },
            ],
            {"sum": src("pair", "sum")},
        ),
        ["node pair", "input a is connected to more than one source"],
    ),
    # OVMS PIPELINE_CONTAINS_UNCONNECTED_NODES (the idle node ran on every request)
    "unconnected_node": (
        pipeline(
            "unconnected_node",
            ["x"],
            [_scale(), _scale("idle")],
            {"y": src("scale", "y")},
        ),
        ["pipeline unconnected_node", "node idle", "does not lead to the pipeline's outputs"],
    ),
    # OVMS PIPELINE_DEMULTIPLY_COUNT_DOES_NOT_MATCH_TENSOR_SHARD_COUNT, at load (was per request)
    "demultiply_count_mismatch": (
        pipeline(
            "demultiply_count_mismatch",
            ["x"],
            [
                custom_node(
                    "split",
                    "split",
                    {"x": src("request", "x")},
                    ["items"],
                    params={"count": "3"},
                    demultiply_count=2,
                ),
            ],
            {"items": src("split", "items")},
        ),
        ["node split", "demultiply_count 2 does not match", "items", "first dimension 3"],
    ),
}


def test_invalid_pipelines_are_reported_by_node_and_the_rest_keeps_serving(
    repo: Repo, tmp_path: Path
) -> None:
    config = write_config(
        tmp_path / "config.json",
        _models(repo),
        [chain(), *(p for p, _ in INVALID.values())],
        LIBRARIES,
    )
    app = app_for(config, tmp_path / "cache")
    errors = app.manager.pipeline_errors
    assert set(errors) == set(INVALID)
    for name, (_, expected) in INVALID.items():
        for text in expected:
            assert text in errors[name], (name, errors[name])
        reply = call(app, "POST", f"/v1/models/{name}:predict", {"inputs": {"x": [[1] * 4]}})
        assert reply.status == 404, name
        assert f"Pipeline {name} is not loaded" in error(reply)
        for folder in (str(NODES), "/nonexistent/", str(tmp_path)):  # no server paths
            assert folder not in error(reply), (name, error(reply))
        # OVMS: a pipeline that failed validation is LOADING with FAILED_PRECONDITION (was 404)
        failed = [
            {
                "version": "1",
                "state": "LOADING",
                "status": {"error_code": "FAILED_PRECONDITION", "error_message": errors[name]},
            }
        ]
        assert doc(call(app, "GET", f"/v1/models/{name}"))["model_version_status"] == failed
        assert doc(call(app, "GET", "/v1/config"))[name]["model_version_status"] == failed
        ready = call(app, "GET", f"/v2/models/{name}/ready")
        assert orjson.loads(ready.body)["ready"] is False, name
    x = np.ones((1, 4), np.float32)
    answer = tfs_columns(
        doc(call(app, "POST", "/v1/models/chain:predict", {"inputs": {"x": x.tolist()}}))
    )
    np.testing.assert_allclose(answer["sum"], [[4.5] * 4])


def test_a_pipeline_named_like_a_model_is_rejected(repo: Repo, tmp_path: Path) -> None:
    config = write_config(tmp_path / "config.json", _models(repo), [chain("scaler")], LIBRARIES)
    with pytest.raises(ConfigError, match="Pipeline name: scaler is already occupied by model"):
        ModelManager.start(Settings(config_path=str(config), cache_dir=str(tmp_path / "c")))


def test_a_stateful_model_cannot_be_a_pipeline_node(repo: Repo, tmp_path: Path) -> None:
    models = [{**m, "stateful": True} if m["name"] == "scaler" else m for m in _models(repo)]
    config = write_config(tmp_path / "config.json", models, [chain()], LIBRARIES)
    app = app_for(config, tmp_path / "cache")
    assert "stateful model scaler cannot be used" in app.manager.pipeline_errors["chain"]


@pytest.mark.parametrize(
    "auto", [{"batch_size": "auto"}, {"shape": "auto"}, {"shape": {"x": "auto"}}]
)
def test_an_auto_model_cannot_be_a_pipeline_node(
    repo: Repo, tmp_path: Path, auto: dict[str, Any]
) -> None:
    """OVMS: FORBIDDEN_MODEL_DYNAMIC_PARAMETER; a pipeline takes dynamic shapes instead."""
    models = [{**m, **auto} if m["name"] == "scaler" else m for m in _models(repo)]
    config = write_config(tmp_path / "config.json", models, [chain()], LIBRARIES)
    app = app_for(config, tmp_path / "cache")
    assert (
        "model scaler has batch_size or shape set to 'auto', which a pipeline does not "
        "take" in app.manager.pipeline_errors["chain"]
    )
    assert call(app, "GET", "/v1/models/scaler").status == 200  # the model itself serves


def _journal(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _journal_until(path: Path, expected: list[str], seconds: float = 5.0) -> list[str]:
    """The journal once it reads `expected` (replaced pipelines retire after a grace)."""
    deadline = time.monotonic() + seconds
    while _journal(path) != expected and time.monotonic() < deadline:
        time.sleep(0.01)
    return _journal(path)


def test_deinitialize_runs_on_reload_and_unload(
    repo: Repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("core.serving.registry.RETIRE_GRACE_S", 0.05)
    journal = tmp_path / "journal.txt"
    config = write_config(
        tmp_path / "config.json",
        _models(repo),
        [chain(offset="0.5", journal=str(journal))],
        LIBRARIES,
    )
    app = app_for(config, tmp_path / "cache")
    assert _journal(journal) == ["init 0.5"]
    x = [[1.0] * 4]
    assert tfs_columns(doc(call(app, "POST", "/v1/models/chain:predict", {"inputs": {"x": x}})))[
        "sum"
    ].tolist() == [[4.5] * 4]
    write_config(config, _models(repo), [chain(offset="2", journal=str(journal))], LIBRARIES)
    assert call(app, "POST", "/v1/config/reload").status == 201
    assert _journal_until(journal, ["init 0.5", "init 2", "deinit 0.5"]) == [
        "init 0.5",
        "init 2",
        "deinit 0.5",
    ]
    assert tfs_columns(doc(call(app, "POST", "/v1/models/chain:predict", {"inputs": {"x": x}})))[
        "sum"
    ].tolist() == [[6.0] * 4]
    write_config(config, _models(repo), [], LIBRARIES)
    call(app, "POST", "/v1/config/reload")
    assert _journal_until(journal, [*_journal(journal)[:3], "deinit 2"])[-1] == "deinit 2"
    assert call(app, "POST", "/v1/models/chain:predict", {"inputs": {"x": x}}).status == 404


def test_a_custom_node_of_a_pipeline_refused_at_load_is_deinitialized(
    repo: Repo, tmp_path: Path
) -> None:
    """The node's initialize() ran before its demultiply_count was found wrong: OVMS
    deinitializes the nodes of a pipeline that does not load."""
    journal = tmp_path / "journal.txt"
    split = custom_node(
        "split",
        "split",
        {"x": src("request", "x")},
        ["items"],
        params={"count": "3", "journal": str(journal)},
        demultiply_count=2,
    )
    bad = pipeline("bad", ["x"], [split], {"items": src("split", "items")})
    config = write_config(tmp_path / "config.json", _models(repo), [bad], LIBRARIES)
    app = app_for(config, tmp_path / "cache")
    assert "demultiply_count 2 does not match" in app.manager.pipeline_errors["bad"]
    assert _journal(journal) == ["init", "deinit"]


def test_a_library_moved_to_another_file_is_what_its_pipelines_run(
    repo: Repo, tmp_path: Path
) -> None:
    moved = tmp_path / "offset_moved.py"
    moved.write_text(
        Path(library("offset"))
        .read_text()
        .replace('y + state["offset"]', 'y + state["offset"] + 100')
    )
    config = write_config(tmp_path / "config.json", _models(repo), [chain()], LIBRARIES)
    app = app_for(config, tmp_path / "cache")
    body = {"inputs": {"x": [[1.0] * 4]}}
    sums = lambda: tfs_columns(doc(call(app, "POST", "/v1/models/chain:predict", body)))["sum"]  # noqa: E731
    assert sums().tolist() == [[4.5] * 4]
    write_config(config, _models(repo), [chain()], {**LIBRARIES, "offset": str(moved)})
    assert call(app, "POST", "/v1/config/reload").status == 201
    assert sums().tolist() == [[104.5] * 4]  # was the old file's 4.5, and a 200 "no change"


def test_a_changed_pipeline_that_fails_shows_in_its_status_while_the_old_one_serves(
    repo: Repo, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "config.json", _models(repo), [chain()], LIBRARIES)
    app = app_for(config, tmp_path / "cache")
    body = {"inputs": {"x": [[1.0] * 4]}}
    broken = chain()
    broken["nodes"][1]["library_name"] = "nolib"
    write_config(config, _models(repo), [broken], LIBRARIES)
    reply = call(app, "POST", "/v1/config/reload")
    assert reply.status == 201
    (status,) = json.loads(reply.body)["chain"]["model_version_status"]
    assert (status["state"], status["status"]["error_code"]) == ("AVAILABLE", "UNKNOWN")
    message = status["status"]["error_message"]
    assert "Reloading the pipeline failed" in message and "'nolib'" in message, message
    assert doc(call(app, "POST", "/v1/models/chain:predict", body))["outputs"]["sum"] == [[4.5] * 4]
    assert call(app, "POST", "/v1/config/reload").status == 200  # the same failure again
    write_config(config, _models(repo), [chain()], LIBRARIES)  # the edit undone
    call(app, "POST", "/v1/config/reload")
    (status,) = doc(call(app, "GET", "/v1/models/chain"))["model_version_status"]
    assert status["status"] == {"error_code": "OK", "error_message": "OK"}


def test_a_pipeline_follows_its_model_to_a_new_version(repo: Repo, tmp_path: Path) -> None:
    root = tmp_path / "models"
    save(scaler(2.0), root / "scaler" / "1")
    models = [{"name": "scaler", "base_path": str(root / "scaler")}, _models(repo)[1]]
    config = write_config(tmp_path / "config.json", models, [chain()], LIBRARIES)
    app = app_for(config, tmp_path / "cache")
    body = {"inputs": {"x": [[1.0] * 4]}}
    assert tfs_columns(doc(call(app, "POST", "/v1/models/chain:predict", body)))[
        "scaled"
    ].tolist() == [[2.0] * 4]
    save(scaler(5.0), root / "scaler" / "2")
    assert app.manager.reload()
    deadline = time.monotonic() + 10
    while True:  # version 1 retires in the background; the pipeline must serve throughout
        answer = tfs_columns(doc(call(app, "POST", "/v1/models/chain:predict", body)))
        if answer["scaled"].tolist() == [[5.0] * 4] or time.monotonic() > deadline:
            break
    assert answer["scaled"].tolist() == [[5.0] * 4]
    assert answer["sum"].tolist() == [[10.5] * 4]
    assert (
        json.loads(call(app, "GET", "/v1/models/chain").body)["model_version_status"][0]["state"]
        == "AVAILABLE"
    )


def test_a_custom_node_breaking_its_outputs_info_is_a_500_naming_it(
    repo: Repo, tmp_path: Path
) -> None:
    modes = ("float64", "shape", "list", "missing")
    liars = []
    for mode in modes:
        liar = chain(f"liar_{mode}", lib="liar")
        liar["nodes"][1]["params"] = {"mode": mode}
        liars.append(liar)
    uneven = pipeline(
        "uneven",
        ["x"],
        [
            custom_node("u", "uneven", {"x": src("request", "x")}, ["p", "q"], demultiply_count=0),
            _scale("after", src("u", "p")),
        ],
        {"y": src("after", "y"), "q": src("u", "q")},
    )
    config = write_config(tmp_path / "config.json", _models(repo), [*liars, uneven], LIBRARIES)
    app = app_for(config, tmp_path / "cache")
    assert app.manager.pipeline_errors == {}
    body = {"inputs": {"x": [[1.0, 2.0, 3.0, 4.0]]}}
    expected = {
        "float64": "Custom node shift output a does not match its outputs_info - Expected: "
        "FP32 (-1,4); Actual: FP64 (1,4)",
        "shape": "Custom node shift output a does not match its outputs_info - Expected: "
        "FP32 (-1,4); Actual: FP32 (1,7)",
        "list": "Actual: FP64 (1,4)",
        "missing": "Node shift did not produce b",
    }
    for mode in modes:
        reply = call(app, "POST", f"/v1/models/liar_{mode}:predict", body)
        assert reply.status == 500, mode
        assert expected[mode] in error(reply), mode
    reply = call(app, "POST", "/v1/models/uneven:predict", body)
    assert reply.status == 500
    assert error(reply) == (
        "Node u demultiplexer outputs differ in their first dimension (p: 2, q: 3)"
    )


def test_a_pipeline_level_demultiply_count_runs_the_nodes_once_per_request_row(
    repo: Repo, tmp_path: Path
) -> None:
    """OVMS "dynamic batch size with demultiplexer": `demultiply_count` on the pipeline splits
    every request input along a new first dimension, the nodes run once per row and the
    outputs stack back (the key was accepted and ignored: the whole batch reached the nodes)."""
    batched = {
        **pipeline(
            "batched",
            ["a", "b"],
            [
                _scale("scale", src("request", "a")),
                model_node(
                    "pair",
                    "two_inputs",
                    {"a": src("scale", "y"), "b": src("request", "b")},
                    ["sum"],
                ),
            ],
            {"sum": src("pair", "sum")},
        ),
        "demultiply_count": -1,
    }
    config = write_config(tmp_path / "config.json", _models(repo), [batched], LIBRARIES)
    app = app_for(config, tmp_path / "cache")
    meta = doc(call(app, "GET", "/v2/models/batched"))
    assert meta["inputs"] == [
        {"name": "a", "datatype": "FP32", "shape": [-1, -1, 4]},
        {"name": "b", "datatype": "FP32", "shape": [-1, -1, 4]},
    ]
    assert meta["outputs"] == [{"name": "sum", "datatype": "FP32", "shape": [-1, -1, 4]}]
    a = np.arange(24, dtype=np.float32).reshape(3, 2, 4)
    b = np.ones((3, 2, 4), np.float32)
    rows = {"inputs": {"a": a.tolist(), "b": b.tolist()}}
    reply = doc(call(app, "POST", "/v1/models/batched:predict", rows))
    np.testing.assert_allclose(reply["outputs"], a * 2 + b)  # one output: TFS's bare list
    uneven = {"inputs": {"a": a.tolist(), "b": b[:2].tolist()}}
    reply = call(app, "POST", "/v1/models/batched:predict", uneven)
    assert reply.status == 400, reply.body
    assert "first dimension" in error(reply)
    # OVMS's DEMULTIPLY_LIMIT: more than 10000 rows is refused before any node runs
    many = np.zeros((10001, 1, 4), np.float32).tolist()
    reply = call(app, "POST", "/v1/models/batched:predict", {"inputs": {"a": many, "b": many}})
    assert reply.status == 400, reply.body[:300]
    assert "Too large dynamic demultiplication requested" in error(reply)
    assert "10001" in error(reply)


def test_one_node_output_under_two_aliases_feeds_both(repo: Repo, tmp_path: Path) -> None:
    """OVMS keys a node's outputs by alias: one data_item may be listed under two aliases
    (the second alias replaced the first, so the pipeline failed to load)."""
    twice = {
        **_scale(),
        "outputs": [{"data_item": "y", "alias": "first"}, {"data_item": "y", "alias": "second"}],
    }
    both = pipeline(
        "both", ["x"], [twice], {"a": src("scale", "first"), "b": src("scale", "second")}
    )
    config = write_config(tmp_path / "config.json", _models(repo), [both], LIBRARIES)
    app = app_for(config, tmp_path / "cache")
    assert app.manager.pipeline_errors == {}
    x = [[1.0, 2.0, 3.0, 4.0]]
    answer = tfs_columns(doc(call(app, "POST", "/v1/models/both:predict", {"inputs": {"x": x}})))
    np.testing.assert_allclose(answer["a"], [[2.0, 4.0, 6.0, 8.0]])
    np.testing.assert_allclose(answer["b"], answer["a"])


def test_of_two_pipelines_with_one_name_the_first_serves(repo: Repo, tmp_path: Path) -> None:
    """OVMS: "Duplicated pipeline names ... Only first definition will be loaded" (the last
    one served)."""
    first, second = chain("dup", offset="0.5"), chain("dup", offset="2")
    config = write_config(tmp_path / "config.json", _models(repo), [first, second], LIBRARIES)
    app = app_for(config, tmp_path / "cache")
    x = [[1.0] * 4]
    answer = tfs_columns(doc(call(app, "POST", "/v1/models/dup:predict", {"inputs": {"x": x}})))
    np.testing.assert_allclose(answer["sum"], [[4.5] * 4])
