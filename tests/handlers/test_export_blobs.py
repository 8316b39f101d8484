"""`ov-serverless export-blobs`: the blobs it writes are the ones a server with the same
settings imports instead of compiling, flat for OVS_COMPILED_CACHE or beside each version, and
a version that does not load fails the command."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.api import App, make_request
from core.config import Settings
from core.serving.registry import ModelManager
from demo.models import classifier, save, write_demo_repository
from handlers import cli
from tests.reload.helpers import wait_for


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    """The demo repository (classifier, scaler); -> its config.json."""
    yield write_demo_repository(tmp_path / "models")


def _export(repo: Path, out: Path, *flags: str) -> int:
    return cli.main(
        [
            "export-blobs",
            str(out),
            "--config_path",
            str(repo),
            "--cache_dir",
            str(out.parent / "export-cache"),
            "--log_level",
            "WARNING",
            *flags,
        ]
    )


def _start(repo: Path, cache: Path, blobs: Path | None = None, concurrent: bool = False) -> App:
    config = Settings(
        config_path=str(repo),
        cache_dir=str(cache),
        concurrent=concurrent,
        compiled_cache=(str(blobs),) if blobs else (),
    )
    return App(ModelManager.start(config), config)


def _hits(app: App) -> dict[str, float]:
    return {
        name: served.versions[1].timings["blob_hit"] for name, served in app.manager.models.items()
    }


def _scaled(app: App) -> tuple[int, bytes]:
    body = json.dumps({"instances": [[1.0, 2.0, 3.0, 4.0]]}).encode()
    response = app.handle(make_request("POST", "/v1/models/scaler:predict", body))
    return response.status, response.body


def test_flat_blobs_serve_with_ovs_compiled_cache_and_answer_as_a_compile(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "blobs"
    assert _export(repo, out) == 0
    printed = sorted(capsys.readouterr().out.split())
    assert printed == sorted(str(p) for p in out.glob("*.blob")) and len(printed) == 2

    compiled = _start(repo, tmp_path / "plain")
    imported = _start(repo, tmp_path / "baked", out)
    assert _hits(compiled) == {"classifier": 0.0, "scaler": 0.0}
    assert _hits(imported) == {"classifier": 1.0, "scaler": 1.0}
    assert _scaled(imported) == _scaled(compiled)
    assert _scaled(imported)[0] == 200


def test_per_version_blobs_copied_beside_their_versions_are_imported(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "blobs"
    assert _export(repo, out, "--per_version") == 0
    for line in capsys.readouterr().out.splitlines():
        local, destination = line.split(" -> ")
        assert Path(local).relative_to(out).parts[1:3] == ("1", ".ov-compiled")
        assert Path(destination).parent == repo.parent / Path(local).relative_to(out).parent
        Path(destination).parent.mkdir(parents=True)
        shutil.copy(local, destination)
    assert _hits(_start(repo, tmp_path / "cache")) == {"classifier": 1.0, "scaler": 1.0}


def test_concurrent_blobs_are_the_ones_a_concurrent_host_imports_for_both_variants(
    repo: Path, tmp_path: Path
) -> None:
    """A concurrent host serves each untuned model on two variants (core.runtime.adaptive); both
    import the one LATENCY blob a one-request host imports too, each with its own hint."""
    assert _export(repo, tmp_path / "one") == 0
    assert _export(repo, tmp_path / "many", "--concurrent") == 0
    one = {p.name for p in (tmp_path / "one").glob("*.blob")}
    many = {p.name for p in (tmp_path / "many").glob("*.blob")}
    assert len(one) == 2 and many == one
    concurrent = _start(repo, tmp_path / "c1", tmp_path / "many", concurrent=True)
    assert _hits(concurrent) == {"classifier": 1.0, "scaler": 1.0}
    assert _scaled(concurrent)[0] == 200  # the first answer lets the throughput variant load
    scaler = concurrent.manager.models["scaler"].versions[1]
    wait_for(lambda: scaler.variants == ("latency", "throughput"), "the throughput variant", 60)
    first, second = scaler._first, scaler._second
    assert first is not None and second is not None
    assert second.blob is not None and second.blob is first.blob  # imported, not compiled
    latency = _start(repo, tmp_path / "c2", tmp_path / "many")
    assert _hits(latency) == {"classifier": 1.0, "scaler": 1.0}
    for app in (concurrent, latency):
        for served in app.manager.models.values():
            served.versions[1].retire(grace=0)


def test_a_version_that_does_not_load_fails_the_export_and_the_rest_are_written(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = repo.parent / "broken" / "1"
    broken.mkdir(parents=True)
    (broken / "model.xml").write_text("<net/>")
    config = json.loads(repo.read_text())
    config["model_config_list"].append({"config": {"name": "broken", "base_path": "broken"}})
    repo.write_text(json.dumps(config))

    assert _export(repo, tmp_path / "blobs") == 1
    captured = capsys.readouterr()
    assert "ov-serverless: model broken version 1 did not load: Cannot load model" in captured.err
    assert len(captured.out.split()) == len(list((tmp_path / "blobs").glob("*.blob"))) == 2


def test_an_out_folder_that_cannot_be_written_is_a_clear_error(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("")
    assert _export(repo, tmp_path / "file" / "blobs") == 1
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(f"cannot write the blobs to {tmp_path / 'file' / 'blobs'}: Not a directory")
    )


def test_a_model_whose_inputs_take_one_row_exports_the_blob_a_concurrent_host_imports_gathered(
    tmp_path: Path,
) -> None:
    """With --concurrent such a model compiles once, gathered (core.runtime.adaptive): the
    export checks its rows first and writes the gathered blob, which a concurrent server
    imports gathered (no read, dim 0 of 1 served) and a one-request server never finds."""
    root = tmp_path / "models"
    save(classifier(seed=0, batch=1), root / "one-row" / "1")
    config = root / "config.json"
    config.write_text(
        json.dumps({"model_config_list": [{"config": {"name": "one-row", "base_path": "one-row"}}]})
    )
    assert _export(config, tmp_path / "many", "--concurrent") == 0
    assert _export(config, tmp_path / "one") == 0
    many = {p.name for p in (tmp_path / "many").glob("*.blob")}
    one = {p.name for p in (tmp_path / "one").glob("*.blob")}
    assert len(many) == len(one) == 1 and many != one
    concurrent = _start(config, tmp_path / "c1", tmp_path / "many", concurrent=True)
    version = concurrent.manager.models["one-row"].versions[1]
    assert version.gathered and version.timings["blob_hit"] == 1.0
    assert version.timings["read_s"] == 0.0
    assert version.inputs["input"].dims[0] == (1, 1)
    single = _start(config, tmp_path / "c2", tmp_path / "many")
    assert _hits(single) == {"one-row": 0.0}  # a one-request host keeps its static compile
    for app in (concurrent, single):
        app.manager.models["one-row"].versions[1].retire(grace=0)
