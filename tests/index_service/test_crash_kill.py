"""SIGKILL at random moments and at every named crash point of the lifecycle; after each restart
every key flushed before the kill is found exactly once, no file is lost or half-written."""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from index_service import FileState, IndexService
from tests.index_service.crash_child import TOPIC, key

ROOT = Path(__file__).resolve().parents[2]
POINTS = ["compact:scratch-written", "compact:published", "compact:done", "upload:put-done", "upload:verified",
          "upload:manifest-written", "upload:done", "roll:sealed"]


_unread: dict[subprocess.Popen[str], bytes] = {}  # bytes read from a child's stdout past the last line returned


def _read_line(proc: subprocess.Popen[str], deadline: float) -> str:
    # the pipe is read here, not through the buffered text stream: a readline() that took two lines (FLUSHED, then
    # AT as the child blocks for the kill) left the second in its buffer, where select() does not see it
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    while True:
        buf = _unread.pop(proc, b"")
        if b"\n" in buf:
            line, rest = buf.split(b"\n", 1)
            _unread[proc] = rest
            return line.decode().strip()
        _unread[proc] = buf
        left = deadline - time.monotonic()
        assert left > 0, "child did not report in time"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 65536)
            assert chunk, f"child exited early (rc={proc.poll()}): {proc.stderr.read() if proc.stderr else ''}"
            _unread[proc] = buf + chunk


def _run_round(data: Path, url: str, t0: int, rng: random.Random, point: str | None) -> tuple[int, str]:
    """Start the child, kill it, return (offsets flushed before the kill, where it was killed)."""
    cmd = [sys.executable, "-m", "tests.index_service.crash_child", str(data), url, str(t0)]
    if point:
        cmd.append(point)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    flushed = 0
    where = "?"
    try:
        deadline = time.monotonic() + 60
        first = _read_line(proc, deadline)
        assert first.startswith("START "), first
        kill_after = rng.randint(1, 12)
        seen = 0
        while True:
            line = _read_line(proc, deadline)
            if line.startswith("FLUSHED "):
                flushed = int(line.split()[1])
                seen += 1
                if point is None and seen >= kill_after:
                    where = f"after {seen} flushes"
                    break
            elif line.startswith("AT "):
                where = line[3:]
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        _unread.pop(proc, None)
        if proc.stdout:
            proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()
    return flushed, where


def _verify(data: Path, url: str, flushed_before: int) -> int:
    """Reopen and check every key; returns how many distinct offsets are indexed."""
    svc = IndexService.open(data, store=url, slots=16, max_items=30, maintain_interval_s=0)
    try:
        rep = svc.recovery
        assert rep is not None and rep.quarantined == [], rep
        assert list((data / "compacting").iterdir()) == []
        ck = svc.checkpoint(TOPIC, 0)
        assert ck is not None and ck + 1 >= flushed_before
        files = svc.files()
        total = sum(f.items for f in files)  # nothing indexed twice: items == distinct offsets
        assert total >= flushed_before
        for i in range(total):
            hits = svc.query(TOPIC, f"k{i}", 5)
            assert [(h.offset, h.size) for h in hits] == [(i, 100)], (i, hits, files)
        assert svc.query(TOPIC, f"k{total}", 5) == []
        for f in files:
            if f.state is FileState.UPLOADED:
                assert svc.store.exists(f.location)  # type: ignore[attr-defined]
            elif f.state is not FileState.IMPORTED:
                assert Path(f.location).exists()
        return total
    finally:
        svc.close()


def test_sigkill_rounds_lose_nothing(tmp_path: Path) -> None:
    data = tmp_path / "idx"
    url = f"file://{tmp_path}/blobs"
    t0 = int(time.time() * 1000)
    rng = random.Random(int(os.environ.get("MQINDEX_CRASH_SEED", "4")))
    plan: list[str | None] = [*POINTS, *([None] * 8), *POINTS[:6]]
    rng.shuffle(plan)
    assert len(plan) >= 20
    wheres = []
    total = 0
    for point in plan:
        flushed, where = _run_round(data, url, t0, rng, point)
        wheres.append(where)
        total = _verify(data, url, flushed)
    assert sum(w.startswith("compact:") for w in wheres) >= 3
    assert sum(w.startswith("upload:") for w in wheres) >= 4
    assert total > 100
    # finally everything goes through the lifecycle
    svc = IndexService.open(data, store=url, slots=16, max_items=30, maintain_interval_s=0)
    try:
        svc.roll()
        svc.maintain()
        states = {f.state for f in svc.files() if f.items}
        assert states == {FileState.UPLOADED}
        for i in range(total):
            assert [h.offset for h in svc.query(TOPIC, f"k{i}", 5)] == [i]
    finally:
        svc.close()


def _batch_round(data: Path, url: str, t0: int, *steps: str) -> int | None:
    """One deterministic round of the child (`--batch`, see crash_child.py), killed once its last batch is
    written; returns queue 0's checkpoint when it opened."""
    cmd = [sys.executable, "-m", "tests.index_service.crash_child", str(data), url, str(t0), "--batch", *steps]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = _read_line(proc, time.monotonic() + 60)
        assert line.startswith("WRITTEN "), line
        ck = line.split()[1]
        return None if ck == "None" else int(ck)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        _unread.pop(proc, None)
        if proc.stdout:
            proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()


def test_redispatch_that_fills_the_file_then_kill_indexes_each_offset_once(tmp_path: Path) -> None:
    """Records found beyond the checkpoint (written before a kill) and new records that overflow the file come in
    one re-dispatched batch: the roll's checkpoint names the next file, so it must cover the records found in
    the sealed one. Killed before the next checkpoint, the next recovery reads no tail from the sealed file, and
    the broker's re-dispatch from the checkpoint must still index every offset exactly once."""
    data = tmp_path / "idx"
    url = f"file://{tmp_path}/blobs"
    t0 = int(time.time() * 1000)
    # 1. offsets 0..26 flushed; 27..29 written (the file is full: 30 items of one key) but not checkpointed
    assert _batch_round(data, url, t0, "0:0:26", "flush", "0:27:29") is None
    # 2. the broker re-dispatches from 24 in one batch: 24..26 are below the checkpoint, 27..29 are found in
    #    the full file, 30..33 roll into a new file; killed before a checkpoint covers them
    assert _batch_round(data, url, t0, "0:24:33") == 26
    # 3. it re-dispatches from its last acknowledged point again, and the index ends with each offset once
    svc = IndexService.open(data, store=url, slots=16, max_items=30, maintain_interval_s=0)
    try:
        ck = svc.checkpoint(TOPIC, 0)
        assert ck is not None and ck >= 26, ck
        svc.put_batch([(TOPIC, 0, i, 100, t0 + i, [f"k{i}"]) for i in range(ck - 2, 34)])
        svc.flush()
        assert sum(f.items for f in svc.files()) == 34, svc.files()  # items == distinct offsets
    finally:
        svc.close()
    assert _verify(data, url, 34) == 34


@pytest.mark.parametrize("second_round", [("0:7:17",), ("0:7:12", "flush"), ()],
                         ids=["catch-up-rolls-then-kill", "catch-up-flushed-then-kill", "catch-up-rolls"])
def test_partition_catch_up_one_after_another_indexes_each_offset_once(tmp_path: Path,
                                                                       second_round: tuple[str, ...]) -> None:
    """After a kill, records of TWO queues lie in the WRITING file beyond the checkpoint. The broker's dispatcher
    catches up one partition after the other: queue 0's catch-up (its records found in the file, then new ones
    that may overflow the file into the next) comes before queue 1's. Whether the file rolled meanwhile, or a
    checkpoint counting the whole file was saved and the process was killed again, queue 1's records found in
    the file must not be indexed a second time."""
    data = tmp_path / "idx"
    url = f"file://{tmp_path}/blobs"
    t0 = int(time.time() * 1000)
    # 1. offsets 0..9 of both queues flushed; 10..12 of both written (26 items of 30), not checkpointed
    assert _batch_round(data, url, t0, "0:0:9", "1:0:9", "flush", "0:10:12", "1:10:12") is None
    # 2. queue 0's catch-up alone, then killed before the next checkpoint (or no second kill)
    if second_round:
        assert _batch_round(data, url, t0, *second_round) == 9
    end0 = 12 if "flush" in second_round else 17
    # 3. the catch-up of every queue from its checkpoint, queue 0 first
    svc = IndexService.open(data, store=url, slots=16, max_items=30, maintain_interval_s=0)
    try:
        for q, end in ((0, end0), (1, 12)):
            ck = svc.checkpoint(TOPIC, q)
            assert ck is not None and ck >= 9, (q, ck)
            svc.put_batch([(TOPIC, q, i, 100, t0 + i, [key(q, i)]) for i in range(ck - 2, end + 1)])
            svc.flush()  # queue 1's catch-up is written after queue 0's, not in one batch with it
        files = svc.files()
        assert sum(f.items for f in files) == end0 + 1 + 13, files  # items == distinct offsets
        for q, end in ((0, end0), (1, 12)):
            for i in range(end + 1):
                assert [(h.offset, h.queue_id) for h in svc.query(TOPIC, key(q, i), 5)] == [(i, q)], (q, i, files)
    finally:
        svc.close()
