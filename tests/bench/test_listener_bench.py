"""The Kafka listener benchmark runs end to end (a few requests): its client checks every answer (once, in
order, no error, the expected offsets) and the table is printed; its figures are not asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import listener


def test_listener_bench_checks_every_answer_and_prints_its_table(capsys: pytest.CaptureFixture[str],
                                                                  tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MQINDEX_BENCH_OUT", str(tmp_path / "out"))
    assert listener.main(["--requests", "60", "--batch-kb", "4", "--partitions", "3", "--rounds", "1",
                          "--dir", str(tmp_path / "work")]) == 0
    out = capsys.readouterr().out
    assert "Kafka listener, in process: 60 produce requests of one 4 KiB batch" in out
    rounds = json.loads((tmp_path / "out" / "listener.json").read_text())["rounds"]
    assert len(rounds) == 1 and rounds[0]["requests"] == 60 and rounds[0]["fsyncs"] >= 1


def test_listener_bench_refuses_a_zero_count() -> None:
    with pytest.raises(SystemExit, match="at least 1"):
        listener.main(["--requests", "0"])
