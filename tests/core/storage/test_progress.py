"""A long download reports progress (bytes done / total, MB/s) in the log; a small one stays
quiet. The threshold and interval are module constants, lowered here."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.storage import folders
from core.storage.backend import RemoteObject
from core.storage.bucket import BucketRepository

SIZE = 400_000


class SlowBackend:
    """Writes each object in four chunks, 50 ms apart, like a slow network would."""

    scheme = "s3"
    bucket = "slow"

    def __init__(self) -> None:
        self.objects = [
            RemoteObject("m/1/model.bin", SIZE, "t1"),
            RemoteObject("m/1/a.xml", 8, "t2"),
        ]

    def list_objects(self, prefix: str) -> Iterator[RemoteObject]:
        return iter([o for o in self.objects if o.key.startswith(prefix)])

    def download(self, obj: RemoteObject, dest: Path) -> None:
        with dest.open("wb") as out:
            for _ in range(4):
                out.write(b"\0" * (obj.size // 4))
                out.flush()
                time.sleep(0.05)
            out.write(b"\0" * (obj.size % 4))

    def read(self, key: str) -> bytes:
        raise NotImplementedError


def _progress(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith("downloading ")]


def test_big_download_logs_progress(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(folders, "PROGRESS_MIN_BYTES", 100_000)
    monkeypatch.setattr(folders, "PROGRESS_INTERVAL_S", 0.03)
    repo = BucketRepository("s3://slow/m", SlowBackend(), "m", tmp_path)
    with caplog.at_level(logging.INFO, logger="ov_serverless.storage"):
        assert (repo.fetch(1).folder / "model.bin").stat().st_size == SIZE
    records = _progress(caplog)
    assert records, caplog.text
    total = SIZE + 8
    for record in records:
        assert record.levelno == logging.INFO
        assert record.bytes_total == total  # type: ignore[attr-defined]
        assert 0 <= record.bytes_done <= total  # type: ignore[attr-defined]
        assert record.mb_per_s >= 0  # type: ignore[attr-defined]
        assert "s3://slow/m/1" in record.getMessage() and "MB/s" in record.getMessage()
    assert any(0 < r.bytes_done < total for r in records)  # type: ignore[attr-defined]
    done = [r.bytes_done for r in records]  # type: ignore[attr-defined]
    assert done == sorted(done)


def test_small_download_stays_quiet(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(folders, "PROGRESS_INTERVAL_S", 0.03)  # default threshold: 50 MB
    repo = BucketRepository("s3://slow/m", SlowBackend(), "m", tmp_path)
    with caplog.at_level(logging.INFO, logger="ov_serverless.storage"):
        repo.fetch(1)
    assert _progress(caplog) == []
    assert any(r.getMessage() == "model version ready" for r in caplog.records)
