"""Index files merged in tiers, on real SeaweedFS: a merged history answers every lookup (keys, time windows, max,
pages) exactly as the files it replaced did, before and after a cold restart; a lookup of a key reads one merged
file; the inputs leave the store only after the grace; retention stops finding merged entries at their time."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from index_service import FileState
from index_service.merging import plan
from index_service.query import QueryStats
from storage_tier.seaweedfs_server import SeaweedFS
from tests.index_service.helpers import ManualClock
from tests.index_service.merge_history import (
    DAY,
    HOUR,
    T0,
    TOPIC,
    WEEK,
    Record,
    answers,
    hourly,
    pages,
    reopen,
    write_history,
)

KEYS = [f"k{i}" for i in range(5)]


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[int, list[Record]]]:
    """Files at random hours over up to ~3 weeks, records with random keys, queues, sizes and times that may
    precede the file's start (dispatch lag) or follow it."""
    n_files = draw(st.integers(2, 14))
    gaps = draw(st.lists(st.integers(1, 60), min_size=n_files, max_size=n_files))
    out: list[tuple[int, list[Record]]] = []
    start = T0 + draw(st.integers(0, 40)) * HOUR
    offsets = [0, 0, 0]
    for g in gaps:
        start += g * HOUR
        recs: list[Record] = []
        for _ in range(draw(st.integers(1, 6))):
            q = draw(st.integers(0, 2))
            keys = tuple(draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True)))
            dt = draw(st.sampled_from([-40 * 60_000, -1, 0, 5, 1000, 30 * 60_000]))
            recs.append((q, offsets[q], draw(st.integers(1, 9)), dt, keys))
            offsets[q] += draw(st.integers(1, 3))
        out.append((start, recs))
    return out


def _lookups(data: st.DataObject, lo_t: int, hi_t: int) -> list[tuple[str, int, int, int | None]]:
    out: list[tuple[str, int, int, int | None]] = []
    for key in [*KEYS, "absent"]:
        for _ in range(3):
            m = data.draw(st.sampled_from([1, 2, 3, 7, 1000]))
            a = data.draw(st.integers(lo_t - HOUR, hi_t + HOUR))
            b = data.draw(st.integers(a, hi_t + 2 * HOUR))
            out.append((key, m, a, b))
        out.append((key, data.draw(st.sampled_from([1, 4, 1000])), 0, None))
    return out


@pytest.mark.slow(seconds=40)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(history=histories(), data=st.data())
def test_a_merged_history_answers_every_lookup_as_its_files_did(seaweedfs: SeaweedFS, history: list[tuple[int, list[
        Record]]], data: st.DataObject) -> None:
    url = seaweedfs.store_url("mqindex", f"t-{uuid.uuid4().hex[:10]}")
    with tempfile.TemporaryDirectory() as tmp:
        idx = Path(tmp) / "idx"
        clock = ManualClock(T0)
        write_history(idx, url, clock, history)
        svc = reopen(idx, url, clock)
        try:
            lo_t, hi_t = history[0][0], history[-1][0]
            lookups = _lookups(data, lo_t, hi_t)
            page = data.draw(st.integers(1, 4))
            before = answers(svc, lookups)
            paged = {k: pages(svc, k, page) for k in KEYS}
            files_before = len(svc.files())
            clock.now = hi_t + 4 * WEEK  # every window closed: days merge, then (after the grace) weeks
            for _ in range(4):
                rep = svc.maintain()
                assert not rep.failed, rep
                assert answers(svc, lookups) == before
                clock.advance(svc.config.merge_grace_ms + 1)
            assert plan(svc.files_map.files(), svc.config, clock.now) == []  # nothing left to merge
            assert len(svc.files()) <= files_before
            assert {k: pages(svc, k, page) for k in KEYS} == paged
            svc.close()
            svc = reopen(idx, url, clock)  # cold: manifests and filters from disk
            assert answers(svc, lookups) == before
            assert {k: pages(svc, k, page) for k in KEYS} == paged
            # no object in the store that no file claims: the merged inputs are gone after the grace
            live = {f.location for f in svc.files() if f.state is FileState.UPLOADED}
            assert {k.removesuffix(".filter") for k in svc.store.list("index/")} == live  # type: ignore[union-attr]
        finally:
            svc.close()


def test_ninety_days_of_hourly_files_merge_into_a_few_dozen_and_a_lookup_reads_one(tmp_path: Path,
                                                                                    seaweedfs: SeaweedFS) -> None:
    url = seaweedfs.store_url("mqindex", f"t-{uuid.uuid4().hex[:10]}")
    clock = ManualClock(T0)
    history = hourly(30, per_hour=1)  # 720 hourly files
    write_history(tmp_path / "idx", url, clock, history)
    svc = reopen(tmp_path / "idx", url, clock)
    try:
        assert len(svc.files()) >= 720
        clock.now = history[-1][0] + HOUR + 2 * HOUR
        while True:
            rep = svc.maintain()
            assert not rep.failed
            if not rep.merged and not rep.released:
                break
            clock.advance(svc.config.merge_grace_ms)
        infos = svc.files()
        tiers = sorted(mf.tier for mf in svc.files_map.files() if mf.state is FileState.UPLOADED)
        assert len(infos) <= 10, [(f.name, f.items) for f in infos]  # 4 weeks + 2 days + the WRITING file
        assert tiers.count(2) == 4 and tiers.count(1) == 2
        svc.close()
        svc = reopen(tmp_path / "idx", url, clock)
        for off in (0, 333, 719):
            before = svc.store.meter.snapshot()  # type: ignore[union-attr]
            stats = QueryStats()
            hits = svc.query_async(TOPIC, f"u{off}", 10, stats=stats).result()
            assert [h.offset for h in hits] == [off]
            assert stats.files_read == 1
            assert (svc.store.meter.snapshot() - before)["GET"] <= 2  # the file's block (+ its filter, once, cold)
        stats = QueryStats()
        assert svc.query_async(TOPIC, "absent", 10, stats=stats).result() == [] and stats.files_read == 0
    finally:
        svc.close()


def test_retention_stops_finding_merged_entries_at_their_time(tmp_path: Path, seaweedfs: SeaweedFS) -> None:
    url = seaweedfs.store_url("mqindex", f"t-{uuid.uuid4().hex[:10]}")
    clock = ManualClock(T0)
    history = hourly(3, per_hour=1)  # u0 at T0 + 17 ms, u1 an hour later, ...
    write_history(tmp_path / "idx", url, clock, history)
    svc = reopen(tmp_path / "idx", url, clock, retention_ms=5 * DAY)
    try:
        clock.now = T0 + 3 * DAY + 2 * HOUR
        svc.maintain()
        merged = [mf for mf in svc.files_map.files() if mf.tier == 1]
        assert len(merged) == 3
        assert [h.offset for h in svc.query(TOPIC, "u0", 10)] == [0]
        assert [h.offset for h in svc.query(TOPIC, "u1", 10)] == [1]
        # u0's time leaves the retention: it is no longer found, while u1, an hour younger in the same merged file,
        # still is, until its own time leaves it
        clock.now = T0 + 17 + 5 * DAY + 1
        assert svc.query(TOPIC, "u0", 10) == []
        assert [h.offset for h in svc.query(TOPIC, "u1", 10)] == [1]
        assert [h.offset for h in svc.query(TOPIC, "k1", 100)] == list(range(1, 72, 7))[::-1]
        clock.now = T0 + HOUR + 17 + 5 * DAY + 1
        assert svc.query(TOPIC, "u1", 10) == []
        # the whole day file expires once its newest entry does
        clock.now = T0 + DAY + 5 * DAY + 1
        rep = svc.maintain()
        assert merged[0].stem in rep.expired
        assert svc.query(TOPIC, "u23", 10) == [] and [h.offset for h in svc.query(TOPIC, "u24", 10)] == [24]
    finally:
        svc.close()
