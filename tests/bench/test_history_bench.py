"""`mqindex bench history --scale ...` runs end to end at a tiny scale against the test SeaweedFS and PostgreSQL:
it prints each peer's row, saves its figures, draws its plots and prints the Markdown table. Its figures are not
asserted, except that the PostgreSQL peer finds every present key and no absent one (a peer that answered
nothing would look fast)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from bench import history


def test_history_scales_prints_every_peer_and_draws_its_plots(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch, pg_dsn: str,
                                                              store_url_factory: Callable[[str], str]) -> None:
    monkeypatch.setenv("MQINDEX_BENCH_OUT", str(tmp_path / "out"))
    argv = ["--scale", "20000", "--span-days", "0.125", "--span-days", "0.25", "--lookups", "20", "--pg", pg_dsn,
            "--store", store_url_factory("s3"), "--plots", str(tmp_path / "plots"), "--filter-cache-bytes", "4096"]
    assert history.main(argv) == 0
    out = capsys.readouterr().out
    for peer in ("mqindex ", "RocketMQ layout*", "PostgreSQL B-tree"):
        assert out.count(f"  {peer}") >= 2, peer  # one row per history at least
    assert "USD per million lookups at $0.0004 per 1,000 GETs" in out
    assert out.count("filter cache bounded to 4,096 bytes") == 2  # each history also looked up under a small bound
    assert "| 20,000 | 0.125 |" in out and "| 20,000 | 0.25 |" in out  # the Markdown table
    runs = json.loads((tmp_path / "out" / "history-scales.json").read_text())["runs"]
    assert [(r["messages"], r["days"]) for r in runs] == [(20_000, 0.125), (20_000, 0.25)]
    for r in runs:
        assert r["postgresql"]["present"]["found"] >= 1 and r["postgresql"]["absent"]["found"] == 0
        assert r["rocketmq"]["gets"] == 2 * r["files_written"]
        for mode in ("read", "mapped"):  # filters evicted and read or mapped again: the same GETs
            assert r["bounded"][mode]["present"]["gets_mean"] == r["rows"]["present"]["gets_mean"]
    assert {p.name for p in (tmp_path / "plots").iterdir()} == {"history_gets.png", "history_p99.png"}
    # the saved runs give the same table again without running
    assert history.main(["--from-results", str(tmp_path / "out" / "history-scales.json")]) == 0
    assert "| 20,000 | 0.25 |" in capsys.readouterr().out


def test_history_filters_alone_compares_read_and_mapped(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--filter-files", "4", "--filter-keys", "200000", "--filter-cache-bytes", "500000", "--lookups", "6"]
    assert history.main(argv) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith(("  read", "  mapped"))]
    assert [(r[0], r[1]) for r in rows] == [("read", "present"), ("read", "absent"), ("mapped", "present"),
                                            ("mapped", "absent")]
    for r in rows:
        held_mb, maybe = float(r[5]), int(r[7])
        assert held_mb <= 0.5  # the bound holds (each 450 KB filter fits; two do not)
        assert maybe >= 6 if r[1] == "present" else maybe <= 1  # every present key found, absent ones ruled out
