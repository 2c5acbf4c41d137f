"""Lifecycle with 20-item files through WRITING -> SEALED -> COMPACTED -> UPLOADED -> EXPIRED on
the real backends (SeaweedFS S3, PostgreSQL, SQLite); retention deletes remote and local state;
a store that is down delays uploads without blocking writes or losing a file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from index_service import FileState
from storage_tier import open_store
from storage_tier.seaweedfs_server import free_ports
from tests.index_service.helpers import ManualClock, Model, as_tuples, open_service

HOUR = 3_600_000


@pytest.mark.parametrize("backend", ["s3", "postgresql", "sqlite"])
def test_lifecycle_all_states_and_retention(backend: str, tmp_path: Path,
                                            store_url_factory: Callable[[str], str]) -> None:
    url = store_url_factory(backend)
    clock = ManualClock()
    idx = tmp_path / "idx"
    svc = open_service(idx, url, clock, retention_ms=2 * HOUR, roll_age_ms=HOUR)
    model = Model()
    try:
        for i in range(65):  # 2 keys each: 6 full files of 20 items + 10 in the WRITING one
            t = clock.now + i
            svc.put("orders", i % 2, i, 64, [f"o{i}", "all"], t)
            model.add("orders", i % 2, i, 64, t, [f"o{i}", "all"])
        svc.flush()
        files = svc.files()
        assert [f.state for f in files] == [FileState.SEALED] * 6 + [FileState.WRITING]
        assert all(f.items == 20 for f in files[:6]) and files[-1].items == 10
        begins = [f.begin_ms for f in files]
        assert begins == sorted(set(begins))  # strictly increasing begin times
        rep = svc.maintain()
        assert len(rep.compacted) == 6 and len(rep.uploaded) == 6 and not rep.failed
        assert [f.state for f in svc.files()] == [FileState.UPLOADED] * 6 + [FileState.WRITING]
        assert len(list((idx / "writing").iterdir())) == 1
        assert list((idx / "compacted").iterdir()) == []
        # each manifest has its key filter beside it, here and in the store
        assert sorted(p.suffix for p in (idx / "uploaded").iterdir()) == [".filter"] * 6 + [".json"] * 6
        remote = open_store(url)
        objects = [f.location for f in svc.files()[:6]]
        assert sorted(remote.list("index/")) == sorted(k + s for k in objects for s in ("", ".filter"))
        for i in (0, 33, 64):
            assert as_tuples(svc.query("orders", f"o{i}", 5)) == model.query("orders", f"o{i}", 5)
        assert as_tuples(svc.query("orders", "all", 100)) == model.query("orders", "all", 100)

        # age roll: the WRITING file (10 items) rolls once older than roll_age_ms
        clock.advance(HOUR - 1)
        assert not svc.maintain().rolled  # begin times are strictly increasing: it began 6 ms later
        clock.advance(10)
        rep = svc.maintain()
        assert rep.rolled and len(rep.uploaded) == 1
        assert [f.state for f in svc.files() if f.items] == [FileState.UPLOADED] * 7

        # new data after 90 minutes; then the old files pass retention (2 h after their newest item)
        clock.advance(HOUR // 2)
        svc.put("orders", 0, 1000, 64, ["fresh", "all"], clock.now)
        svc.flush()
        clock.advance(HOUR + HOUR // 2)
        rep = svc.maintain()
        assert len(rep.expired) == 7 and rep.rolled  # the file holding "fresh" rolled by age, is uploaded
        (kept,) = [f for f in svc.files() if f.items]
        assert kept.state is FileState.UPLOADED and kept.items == 2
        assert remote.list("index/") == [kept.location, kept.location + ".filter"]
        assert sorted(p.suffix for p in (idx / "uploaded").iterdir()) == [".filter", ".json"]
        assert svc.query("orders", "o5", 5) == []
        assert [h.offset for h in svc.query("orders", "all", 100)] == [1000]
        remote.close()
    finally:
        svc.close()
    svc = open_service(idx, url, clock, retention_ms=2 * HOUR)
    try:  # expired state stays expired after a restart
        assert [f.state for f in svc.files() if f.items] == [FileState.UPLOADED]
        assert [h.offset for h in svc.query("orders", "all", 100)] == [1000]
    finally:
        svc.close()


def test_store_down_retries_later_without_blocking_writes(tmp_path: Path, seaweedfs) -> None:  # type: ignore[no-untyped-def]
    """Uploads to a store that refuses connections fail and back off; puts, flushes and queries go on;
    reopened with the store up, every file is uploaded and nothing is lost."""
    clock = ManualClock()
    (dead_port,) = free_ports(1)
    prefix = f"down-{tmp_path.name[-8:]}"
    down = f"s3://mqindex/{prefix}?endpoint=http://127.0.0.1:{dead_port}&retry_seconds=0.2"
    idx = tmp_path / "idx"
    svc = open_service(idx, down, clock, retry_initial_s=30)
    try:
        for i in range(50):
            svc.put("t", 0, i, 1, [f"k{i}"], clock.now + i)
        svc.flush()
        rep = svc.background.cycle(ignore_backoff=False)
        assert len(rep.compacted) == 2 and len(rep.failed) == 2 and not rep.uploaded
        assert all(mf.failures == 1 and mf.next_attempt > 0 for mf in svc.files_map.by_state(FileState.COMPACTED))
        rep = svc.background.cycle(ignore_backoff=False)  # backing off: not even tried
        assert not rep.failed and not rep.uploaded
        for i in range(50, 70):  # writes are not blocked
            svc.put("t", 0, i, 1, [f"k{i}"], clock.now + i)
        svc.flush()
        assert [h.offset for h in svc.query("t", "k3", 5)] == [3]
        assert [h.offset for h in svc.query("t", "k65", 5)] == [65]
    finally:
        svc.close()
    svc = open_service(idx, seaweedfs.store_url("mqindex", prefix), clock)
    try:
        rep = svc.maintain()
        assert len(rep.uploaded) == 3 and not rep.failed
        assert [f.state for f in svc.files() if f.items] == [FileState.UPLOADED] * 3 + [FileState.WRITING]
        for i in range(70):
            assert [h.offset for h in svc.query("t", f"k{i}", 5)] == [i]
    finally:
        svc.close()


def test_rocketmq_geometry_works(tmp_path: Path) -> None:
    """RocketMQ's 5,000,000 slots / 20,000,000 items per file: sparse files, same lifecycle."""
    from index_service import ServiceConfig

    cfg = ServiceConfig.rocketmq_defaults(maintain_interval_s=0)
    assert (cfg.slots, cfg.max_items) == (5_000_000, 20_000_000)
    clock = ManualClock()
    svc = open_service(tmp_path / "idx", f"file://{tmp_path}/blobs", clock, slots=cfg.slots, max_items=cfg.max_items)
    try:
        svc.put_batch([("t", i % 4, i, 1, clock.now + i, [f"k{i}", "all"]) for i in range(5000)])
        svc.flush()
        (w,) = svc.files()
        assert w.items == 10_000 and w.state is FileState.WRITING
        assert [h.offset for h in svc.query("t", "k4321", 5)] == [4321]
        svc.roll()
        svc.maintain()
        assert [f.state for f in svc.files() if f.items] == [FileState.UPLOADED]
        assert [h.offset for h in svc.query("t", "all", 3)] == [4999, 4998, 4997]
    finally:
        svc.close()


def test_an_admin_compaction_racing_the_background_leaves_the_file_compacted_once(tmp_path: Path) -> None:
    """The background compacts the file an age roll sealed while an admin's compact_now, which took the same file
    as its WRITING one, compacts it too: the second finds it done (it used to fail, its source gone); the file is
    COMPACTED once and answers queries."""
    clock = ManualClock()
    svc = open_service(tmp_path / "idx", None, clock, roll_age_ms=HOUR)
    try:
        for i in range(5):
            svc.put("orders", 0, i, 64, [f"o{i}"], clock.now + i)
        svc.flush()
        mf = svc.writer.current
        assert mf is not None
        clock.advance(HOUR + 10)
        assert svc.maintain().rolled  # the background: sealed by age and compacted
        assert mf.state is FileState.COMPACTED
        svc.lifecycle.compact(mf)  # compact_now's step on the same file, after the background's
        assert mf.state is FileState.COMPACTED
        assert [f.state for f in svc.files() if f.items] == [FileState.COMPACTED]
        assert as_tuples(svc.query("orders", "o3", 5)) == [(clock.now - HOUR - 10 + 3, 3, 0, 64)]
    finally:
        svc.close()
