"""`mqindex bench metadata` runs end to end at tiny sizes: the opened images are checked, figures are not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import metadata


def test_metadata_bench_runs(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MQINDEX_BENCH_OUT", str(tmp_path))
    assert metadata.main(["--commits", "300,600", "--live", "100", "--every", "200",
                          "--full-replay-max", "300"]) == 0
    out = capsys.readouterr().out
    assert "| snapshot + tail" in out and "| full replay" in out and "(est.)" in out
    results = json.loads((tmp_path / "metadata.json").read_text())["results"]
    snap_600 = next(r for r in results if r["commits"] == 600 and r["snapshots"])
    assert snap_600["live_objects"] == 100 and snap_600["tail_records"] < 200
    assert snap_600["log_rows_kept"] < snap_600["records"]  # the log was truncated behind the snapshots


def test_metadata_bench_runs_on_postgresql(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch, pg_dsn: str) -> None:
    import psycopg

    monkeypatch.setenv("MQINDEX_BENCH_OUT", str(tmp_path))
    assert metadata.main(["--commits", "300,600", "--live", "100", "--every", "200", "--full-replay-max", "300",
                          "--pg", pg_dsn]) == 0
    out = capsys.readouterr().out
    assert "Metadata open (PostgreSQL" in out and "was not run" in out
    results = json.loads((tmp_path / "metadata.json").read_text())["results"]
    assert {(r["commits"], r["snapshots"], r["estimated"]) for r in results} == {
        (300, True, False), (300, False, False), (600, True, False), (600, False, True)}
    with psycopg.connect(pg_dsn) as conn:  # the measurement schemas are dropped
        left = conn.execute("SELECT count(*) FROM information_schema.schemata "
                            "WHERE schema_name LIKE 'bench\\_metadata\\_%'").fetchone()
    assert left is not None and left[0] == 0
