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
