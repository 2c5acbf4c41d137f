"""Object compaction on SeaweedFS with SQLite and PostgreSQL metadata: stream set object merge and split,
retention, stream object compaction by server-side copy, memory bound, fencing, reads during compaction."""

from __future__ import annotations

import threading
import time
import tracemalloc
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from broker.compaction import CompactionConfig, CompactionReport, Compactor
from broker.compaction.plan import READ_THREADS, memory_budget
from broker.errors import Fenced
from broker.metadata.client import MetadataClient
from broker.metadata.requests import CompactedStreamObject
from storage_tier import open_store
from tests.broker.compaction_helpers import open_streams, read_stream, upload_rounds

MiB = 1 << 20


@pytest.fixture
def store(seaweedfs):  # type: ignore[no-untyped-def]
    s = open_store(seaweedfs.store_url("mqindex", f"cmp-{uuid.uuid4().hex[:8]}"))
    yield s
    s.close()


def _keys(store, meta: MetadataClient) -> set[str]:  # type: ignore[no-untyped-def]
    return {k for k in store.list() if k.split("/")[1] == meta.namespace}


def test_merge_drops_expired_and_keeps_every_record(store, meta_url_factory: Callable[[], str]) -> None:  # type: ignore[no-untyped-def]
    meta, sids = open_streams(meta_url_factory(), 6)
    written = upload_rounds(store, meta, sids, rounds=12, payload=2000)
    assert meta.object_counts() == {"stream_set_objects": 12, "stream_objects": 0}
    # retention: stream 0 trimmed past its first 8 records, stream 1 deleted
    meta.trim_stream(sids[0], 0, written[sids[0]][8].base_offset)
    meta.delete_stream(sids[1], 0)
    stored_before = sum(store.size(k) for k in _keys(store, meta))
    report = Compactor(store, meta, CompactionConfig(interval_s=0, grace_ms=0)).run_once()
    assert not report.errors, report.errors
    assert report.objects_in == 12 and report.objects_out == 1 and report.merged == 12
    assert meta.object_counts() == {"stream_set_objects": 1, "stream_objects": 0}
    assert len(report.deleted) == 12  # no grace: the sources are gone from the store in the same cycle
    for sid in sids[2:]:
        assert read_stream(store, meta, sid) == written[sid]  # byte-identical at the same offsets
    start = written[sids[0]][8].base_offset
    assert read_stream(store, meta, sids[0], start) == written[sids[0]][8:]
    stored_after = sum(store.size(k) for k in _keys(store, meta))
    assert stored_after < stored_before * 4 / 5 * 0.95  # stream 1 and 8/12 of stream 0 are gone
    assert _keys(store, meta) == {meta.object_key(oid) for oid in meta.committed_objects()}
    # a second cycle has nothing to do
    again = Compactor(store, meta, CompactionConfig(interval_s=0)).run_once()
    assert again.objects_in == 0 and again.objects_out == 0


def test_force_split_and_gaps_make_stream_objects(store, meta_url_factory: Callable[[], str]) -> None:  # type: ignore[no-untyped-def]
    meta, sids = open_streams(meta_url_factory(), 4)
    written = upload_rounds(store, meta, sids, rounds=5, payload=1000)
    # every SSO older than the force-split age (the clock moved 3 h on): split wholly into stream objects
    cfg = CompactionConfig(interval_s=0, grace_ms=0)
    report = Compactor(store, meta, cfg).run_once(now_ms=int(time.time() * 1000) + 3 * 3600_000)
    assert not report.errors and report.force_split == 5
    counts = meta.object_counts()
    assert counts["stream_set_objects"] == 0 and counts["stream_objects"] == 4  # then merged per stream
    for sid in sids:
        assert read_stream(store, meta, sid) == written[sid]


def test_so_compaction_moves_bytes_by_copy(store, meta_url_factory: Callable[[], str]) -> None:  # type: ignore[no-untyped-def]
    meta, sids = open_streams(meta_url_factory(), 1)
    written = upload_rounds(store, meta, sids, rounds=3, payload=6 * MiB)  # one 6 MiB SO per upload
    assert meta.object_counts()["stream_objects"] == 3
    total = sum(meta.get_stream(sids[0]).stream_objects[i].size for i in range(3))
    before = store.meter.snapshot()
    report = Compactor(store, meta, CompactionConfig(interval_s=0, grace_ms=0)).run_once()
    used = store.meter.snapshot() - before
    assert not report.errors and report.streams_compacted == 1
    assert meta.object_counts()["stream_objects"] == 1
    assert used["COPY"] == 3
    moved = report.bytes_copied + used.bytes_in
    assert report.bytes_copied >= 0.9 * moved and used.bytes_in < 0.1 * total, (report, used)
    assert read_stream(store, meta, sids[0]) == written[sids[0]]


def test_compacted_stream_objects_are_not_copied_again(store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    meta, sids = open_streams(f"sqlite:///{tmp_path}/meta.sqlite", 1)
    written = upload_rounds(store, meta, sids, rounds=3, payload=6 * MiB)  # three 6 MiB stream objects
    compactor = Compactor(store, meta, CompactionConfig(interval_s=0, grace_ms=0))
    first = compactor.run_once()
    assert not first.errors and first.bytes_copied >= 18 * MiB and meta.object_counts()["stream_objects"] == 1
    big = meta.get_stream(sids[0]).stream_objects[0]

    def cycle() -> tuple[CompactionReport, Any]:
        before = store.meter.snapshot()
        report = compactor.run_once()
        assert not report.errors, report.errors
        return report, store.meter.snapshot() - before

    report, used = cycle()  # nothing new: nothing is copied, read or written
    assert report.bytes_copied == 0 and used["COPY"] == 0 and used["PUT"] == 0 and used.bytes_in == 0
    # a small object lands next to the big one: the big one is not copied to append it
    written = upload_rounds(store, meta, sids, rounds=1, payload=1 * MiB, after=written)
    report, used = cycle()
    assert report.bytes_copied == 0 and used["COPY"] == 0 and used.bytes_in == 0
    # two small ones are merged with each other, still without touching the big one
    written = upload_rounds(store, meta, sids, rounds=1, payload=1 * MiB, after=written)
    report, used = cycle()
    assert report.streams_compacted == 1 and used["COPY"] == 0 and used.bytes_in < 3 * MiB, (report, used)
    sos = meta.get_stream(sids[0]).stream_objects
    assert len(sos) == 2 and sos[0] == big
    assert read_stream(store, meta, sids[0]) == written[sids[0]]


def test_memory_bound_with_input_ten_times_the_cache(store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # one metadata backend: memory does not depend on it, and the 160 MiB input is the slow part
    cache = 16 * MiB
    meta, sids = open_streams(f"sqlite:///{tmp_path}/meta.sqlite", 4)
    written = upload_rounds(store, meta, sids, rounds=40, payload=1 * MiB)  # 40 SSOs of 4 MiB: 160 MiB
    total = sum(o.size for o in meta.node_objects()[0])
    assert total >= 10 * cache
    cfg = CompactionConfig(interval_s=0, grace_ms=0, cache_size=cache, split_size=1 << 30)
    tracemalloc.start()
    try:
        report = Compactor(store, meta, cfg).run_once()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not report.errors and report.plans >= 10
    # reads, the plan and the output's part buffer share the cache; the margin is the bookkeeping of the
    # source objects and blocks and the interpreter's own allocations
    assert peak < 1.25 * cache, (peak / cache, peak, cache, total)
    assert meta.object_counts() == {"stream_set_objects": 1, "stream_objects": 0}
    for sid in sids:
        assert read_stream(store, meta, sid) == written[sid]


def test_cache_too_small_for_the_part_buffer_is_refused() -> None:
    with pytest.raises(ValueError, match="cache_size .* too small"):
        CompactionConfig(cache_size=8 * MiB, part_size=5 * MiB)
    budget = memory_budget(200 * MiB, 5 * MiB, 16 * MiB)
    assert budget.writer + READ_THREADS * budget.read_batch + budget.plan == 200 * MiB and budget.plan > 140 * MiB


def test_fenced_node_commits_nothing(store, meta_url_factory: Callable[[], str]) -> None:  # type: ignore[no-untyped-def]
    url = meta_url_factory()
    meta, sids = open_streams(url, 2)
    upload_rounds(store, meta, sids, rounds=3, payload=100)
    newer = MetadataClient(url, 0)
    newer.register_node()  # a newer incarnation of node 0
    offset = newer.catch_up()
    report = Compactor(store, meta, CompactionConfig(interval_s=0, grace_ms=0)).run_once()
    assert any("Fenced" in e for e in report.errors)
    assert newer.catch_up() == offset  # nothing appended
    assert meta.object_counts()["stream_set_objects"] == 3
    first = meta.prepare_objects if False else None  # noqa: F841 - the stale client cannot even prepare
    with pytest.raises(Fenced):
        meta.commit_compaction([min(o.object_id for o in meta.node_objects()[0])],
                               stream_objects=[CompactedStreamObject(999, sids[0], 0, 3, 10)])
    newer.close()


def test_reads_during_compaction_and_deletes_never_fail(store, meta_url_factory: Callable[[], str]) -> None:  # type: ignore[no-untyped-def]
    url = meta_url_factory()
    meta, sids = open_streams(url, 5)
    written = upload_rounds(store, meta, sids, rounds=15, payload=3000)
    reader_meta = MetadataClient(url, 1)
    stop = threading.Event()
    failures: list[str] = []
    reads = [0]

    def reader() -> None:
        while not stop.is_set():
            for sid in sids:
                try:
                    got = read_stream(store, reader_meta, sid)
                    if got != written[sid]:
                        failures.append(f"stream {sid}: {len(got)} records differ")
                except Exception as exc:  # noqa: BLE001 - recorded, the test fails on it
                    failures.append(f"stream {sid}: {type(exc).__name__}: {exc}")
                reads[0] += 1

    t = threading.Thread(target=reader)
    t.start()
    try:
        compactor = Compactor(store, meta, CompactionConfig(interval_s=0, grace_ms=1500))
        report = compactor.run_once()
        assert report.objects_in == 15 and not report.deleted  # within the grace period: nothing deleted
        deadline = time.monotonic() + 30
        deleted: list[int] = []
        while not deleted and time.monotonic() < deadline:
            deleted = compactor.run_once().deleted
            time.sleep(0.1)
        assert len(deleted) == 15
        mark = reads[0]
        while reads[0] < mark + 2 * len(sids) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        t.join()
        reader_meta.close()
    assert not failures, failures[:5]
    assert reads[0] > 2 * len(sids)
