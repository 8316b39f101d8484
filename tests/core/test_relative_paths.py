"""errors.relative: the one way server folders leave client-facing messages (model loads, a
model's repository, custom node libraries): written relative, under both spellings."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import relative


def test_a_folder_and_its_resolved_spelling_become_relative(tmp_path: Path) -> None:
    real = tmp_path / "real" / "models"
    real.mkdir(parents=True)
    (tmp_path / "link").symlink_to(real)
    linked = tmp_path / "link"
    text = f"Cannot read {linked}/1/model.xml nor {real}/2/model.bin in {linked}"
    assert relative(text, linked) == "Cannot read 1/model.xml nor 2/model.bin in ."
    assert relative(f"{real}/model.xml, {real}", real, "1") == "1/model.xml, 1"


def test_a_trailing_separator_and_a_relative_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert relative(f"{tmp_path}/boxes_node.py: no execute()", ".") == "boxes_node.py: no execute()"
    assert relative(f"{tmp_path}/m/1/x.xml", str(tmp_path / "m") + "/") == "1/x.xml"


def test_bucket_urls_and_empty_folders_leave_the_text() -> None:
    text = "s3://bucket/models/1/model.xml is not readable"
    assert relative(text, "s3://bucket/models") == text
    assert relative(text, "") == text
