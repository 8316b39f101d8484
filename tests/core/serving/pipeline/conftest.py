"""One repository for the pipeline suites: the detect_classify example (detector, classifier,
crop custom node) plus scaler (x2) and two_inputs, with the test pipelines beside it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.api import App
from demo.models import save, scaler, two_inputs
from examples.detect_classify.build import build
from tests.core.serving.pipeline.helpers import app_for, chain, fanout, library


@dataclass(frozen=True)
class Repo:
    root: Path
    config: Path

    def xml(self, model: str, version: int = 1) -> Path:
        return self.root / model / str(version) / "model.xml"


@pytest.fixture(scope="session")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    root = tmp_path_factory.mktemp("pipelines")
    config = build(root)
    save(scaler(2.0), root / "scaler" / "1")
    save(two_inputs(), root / "two_inputs" / "1")
    doc = json.loads(config.read_text())
    doc["model_config_list"] += [
        {"config": {"name": n, "base_path": n}} for n in ("scaler", "two_inputs")
    ]
    doc["custom_node_library_config_list"] += [
        {"name": n, "base_path": library(n)} for n in ("offset", "split", "total", "boom")
    ]
    boom = chain("boom", lib="boom")
    doc["pipeline_config_list"] += [chain(), fanout(), boom]
    config.write_text(json.dumps(doc, indent=1))
    return Repo(root, config)


@pytest.fixture(scope="session")
def app(repo: Repo, tmp_path_factory: pytest.TempPathFactory) -> App:
    served = app_for(repo.config, tmp_path_factory.mktemp("pipeline-cache"))
    assert served.manager.pipeline_errors == {}
    return served
