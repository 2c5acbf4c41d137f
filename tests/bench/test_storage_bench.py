"""The storage benchmark runs end to end (tiny sizes) and prints its table; its figures are not asserted."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import storage_tier


def test_storage_bench_prints_every_backend(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch, pg_dsn: str) -> None:
    monkeypatch.setenv("MQINDEX_BENCH_OUT", str(tmp_path))
    assert storage_tier.main(["--gets", "10", "--puts", "2", "--blob-mib", "4", "--pg", pg_dsn]) == 0
    out = capsys.readouterr().out
    for backend in ("local", "s3", "sqlite", "postgresql"):
        assert f"| {backend}" in out
    assert "GET 4 KiB" in out and "PUT 4 MiB" in out
    assert (tmp_path / "storage_tier.json").exists()
