"""A merge killed with SIGKILL at each of its steps, on real SeaweedFS: after the restart the index answers every
lookup exactly as before the merge (no entry lost or doubled), a lookup reads no file twice, the merge then
completes, and once the grace has passed no object is left in the store that no index file claims."""

from __future__ import annotations

import select
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from index_service import FileState, IndexService
from index_service.query import QueryStats
from storage_tier.seaweedfs_server import SeaweedFS
from tests.index_service.helpers import ManualClock
from tests.index_service.merge_history import DAY, HOUR, T0, TOPIC, answers, hourly, reopen, write_history

ROOT = Path(__file__).resolve().parents[2]
POINTS = ["merge:scratch-written", "merge:uploaded", "merge:filter-written", "merge:committed", "merge:swapped",
          "merge:done", "merge:inputs-deleted", "merge:released"]
LOOKUPS = [(f"k{i}", m, 0, None) for i in range(7) for m in (1, 5, 1000)] + [
    (f"u{i}", 3, 0, None) for i in range(0, 150, 11)] + [
    ("k3", 1000, T0 + DAY // 2, T0 + 2 * DAY), ("nope", 5, 0, None)]


def _kill_at(data: Path, url: str, now: int, point: str) -> None:
    cmd = [sys.executable, "-m", "tests.index_service.merge_child", str(data), url, str(now), point]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        ready: list[object] = []
        while not ready:
            left = deadline - time.monotonic()
            assert left > 0, "the merge did not reach the crash point in time"
            ready, _, _ = select.select([proc.stdout], [], [], left)
        line = proc.stdout.readline().strip()
        assert line == f"AT {point}", (line, proc.stderr.read() if proc.stderr else "")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()


def _reads_each_file_once(svc: IndexService) -> None:
    for key, m, lo, hi in LOOKUPS:
        stats = QueryStats()
        svc.query_async(TOPIC, key, m, lo, hi, stats=stats).result()
        assert stats.files_read <= stats.files_considered == len({id(mf) for mf in svc.files_map.files()
                                                                   if mf.time_bounds() is not None
                                                                   and mf.time_bounds()[0] <= (hi or 1 << 62)
                                                                   and mf.time_bounds()[1] >= lo})


def _store_keys(svc: IndexService) -> set[str]:
    return {k.removesuffix(".filter") for k in svc.store.list("index/")}  # type: ignore[union-attr]


@pytest.mark.parametrize("point", POINTS)
def test_a_merge_killed_at_each_step_leaves_the_index_answering_as_before(tmp_path: Path, seaweedfs: SeaweedFS,
                                                                          point: str) -> None:
    url = seaweedfs.store_url("mqindex", f"t-{uuid.uuid4().hex[:10]}")
    clock = ManualClock(T0)
    idx = tmp_path / "idx"
    write_history(idx, url, clock, hourly(2))
    svc = reopen(idx, url, clock)
    before = answers(svc, LOOKUPS)
    files_before = len(svc.files())
    svc.close()

    now = T0 + 2 * DAY + 2 * HOUR  # both days closed: two merges
    _kill_at(idx, url, now, point)

    clock.now = now
    svc = reopen(idx, url, clock)
    try:
        assert answers(svc, LOOKUPS) == before
        _reads_each_file_once(svc)
        assert svc.recovery is not None and not svc.recovery.quarantined
        for _ in range(3):  # the merge finishes, then its inputs go after the grace
            rep = svc.maintain()
            assert not rep.failed, rep
            assert answers(svc, LOOKUPS) == before
            clock.advance(svc.config.merge_grace_ms + 1)
        infos = svc.files()
        assert len(infos) < files_before
        assert sorted(mf.tier for mf in svc.files_map.files() if mf.state is FileState.UPLOADED) == [1, 1]
        live = {f.location for f in infos if f.state is FileState.UPLOADED}
        assert _store_keys(svc) == live  # no orphan after the grace
        assert sorted(p.name for p in (idx / "uploaded").iterdir()) == sorted(
            [Path(k).stem + ".json" for k in live] + [Path(k).stem + ".filter" for k in live])
        _reads_each_file_once(svc)
    finally:
        svc.close()
