"""The writer saves its checkpoint at most every `checkpoint_interval_ms` while it writes, at once when a flush
waits: records are queryable before the checkpoint covers them, a flush returns only once it does, and a
process killed in between loses nothing (the recovered tail holds what was written; the records the broker
sends again are dropped, not indexed twice)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.index_service.helpers import open_service

N = 100
T0 = 1_700_000_000_000
REPO = Path(__file__).parents[2]


def _wait(what: str, ok, bound_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + bound_s
    while not ok():
        assert time.monotonic() < deadline, f"not true after {bound_s}s: {what}"
        time.sleep(0.01)


def test_written_records_are_queryable_before_the_checkpoint_and_flush_saves_it(tmp_path: Path) -> None:
    svc = open_service(tmp_path / "idx", None, max_items=1000, checkpoint_interval_ms=3_600_000)
    try:
        svc.put_batch([("t", 0, i, 1, T0 + i, [f"k{i}"]) for i in range(N)])
        _wait("the last record written", lambda: len(svc.query("t", f"k{N - 1}")) == 1)
        assert svc.checkpoint("t", 0) is None  # an hour between checkpoints: none saved yet
        svc.flush()
        assert svc.checkpoint("t", 0) == N - 1
    finally:
        svc.close()
    again = open_service(tmp_path / "idx", None, max_items=1000)
    try:
        assert again.checkpoint("t", 0) == N - 1
    finally:
        again.close()


def test_zero_interval_saves_after_every_write(tmp_path: Path) -> None:
    svc = open_service(tmp_path / "idx", None, max_items=1000, checkpoint_interval_ms=0)
    try:
        svc.put_batch([("t", 3, i, 1, T0 + i, [f"k{i}"]) for i in range(N)])
        _wait("the checkpoint saved without a flush", lambda: svc.checkpoint("t", 3) == N - 1)
    finally:
        svc.close()


CHILD = textwrap.dedent("""
    import sys, time
    from index_service import IndexService
    svc = IndexService.open(sys.argv[1], slots=64, max_items=1000, maintain_interval_s=0, flush_interval_ms=5,
                            checkpoint_interval_ms=3_600_000)
    svc.put_batch([("t", 0, i, 1, %d + i, [f"k{i}"]) for i in range(%d)])
    deadline = time.monotonic() + 30
    while len(svc.query("t", "k%d")) != 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    print("WRITTEN", svc.checkpoint("t", 0), flush=True)
    time.sleep(120)
""") % (T0, N, N - 1)


def test_a_kill_between_checkpoints_loses_nothing_and_indexes_nothing_twice(tmp_path: Path) -> None:
    data = tmp_path / "idx"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(data)], cwd=str(REPO), stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.split() == ["WRITTEN", "None"], line  # written, not covered by a saved checkpoint
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(30)
    svc = open_service(data, None, max_items=1000)
    try:
        assert svc.checkpoint("t", 0) is None
        for i in range(N):  # the recovered tail: every written record is found
            assert [h.offset for h in svc.query("t", f"k{i}")] == [i]
        # the broker dispatches from the checkpoint again: everything is re-sent, nothing is indexed twice
        svc.put_batch([("t", 0, i, 1, T0 + i, [f"k{i}"]) for i in range(N)])
        svc.flush()
        assert svc.checkpoint("t", 0) == N - 1
        for i in range(N):
            assert [h.offset for h in svc.query("t", f"k{i}")] == [i]
    finally:
        svc.close()
