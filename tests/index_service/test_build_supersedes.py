"""A build registered from outside the service (as `mqindex spark-build` registers one) that indexed everything
over a range supersedes the service's own uploaded files lying wholly in it, on real SeaweedFS: Hypothesis draws
histories, the build's range (sometimes on file boundaries, sometimes cutting files) and lookups (keys, time
windows, max); answers equal what the files answered before the build, the superseded files' entries are served by
the build's file only (served items = entries, plus only the entries of files the range cuts), their objects are
deleted after the grace, and a cold restart answers the same."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from index_file import NativeIndexWriter, compact
from index_service import FileState, IndexService
from index_service import external_builds as eb
from storage_tier import open_store
from tests.index_service.helpers import ManualClock, open_service

T0 = 1_700_000_000_000
GRACE_MS = 600_000
Record = tuple[int, int, int, str]  # partition, offset, store time, key


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[Record], int, int]:
    n = draw(st.integers(10, 90))
    keys = draw(st.lists(st.sampled_from([f"k{i}" for i in range(12)]), min_size=n, max_size=n))
    steps = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    parts = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    recs: list[Record] = []
    nxt = [0, 0]
    t = T0
    for i in range(n):
        t += steps[i]
        q = parts[i]
        recs.append((q, nxt[q], t, keys[i]))
        nxt[q] += 1
    a = draw(st.integers(0, n - 1))
    b = draw(st.integers(a + 1, n))
    return recs, a, b


def _answer(recs: list[Record], key: str, begin: int, end: int, max_count: int) -> list[tuple[int, int, int]]:
    hits = sorted(((t, o, q) for q, o, t, k in recs if k == key and begin <= t <= end), reverse=True)
    return [(q, o, t) for t, o, q in hits[:max_count]]


def _ask(svc: IndexService, key: str, begin: int, end: int, max_count: int) -> list[tuple[int, int, int]]:
    return [(h.queue_id, h.offset, h.store_time_ms) for h in svc.query("orders", key, max_count, begin, end)]


def _register(tmp: Path, idx: Path, store: object, recs: list[Record], lo_ms: int, hi_ms: int) -> None:
    """A build of every record stored in [lo_ms, hi_ms): one compacted file, uploaded, registered with what it
    covers (every offset of both partitions read)."""
    name, attempt = uuid.uuid4().hex[:16], uuid.uuid4().hex[:12]
    from jobs import spark_build as sb

    inside = sorted((r for r in recs if lo_ms <= r[2] < hi_ms), key=lambda r: r[2])
    begin = inside[0][2] if inside else lo_ms
    stem = sb.build_stem(begin, name, attempt, 0)
    src, dst = tmp / f"{stem}.mqxu", tmp / f"{stem}.mqxc"
    w = NativeIndexWriter.create(src, begin, 64, max(1, len(inside)))
    w.put_batch([("orders", q, o, 10, t, [k]) for q, o, t, k in inside])
    w.seal()
    w.close()
    stats = compact(src, dst, items_per_block=16)
    key = sb.build_key(name, attempt, stem)
    size, crc = sb._upload(store, dst, key, 1 << 20, sb.abort_marker(name, attempt))  # type: ignore[arg-type]
    runs = {str(q): [[0, 1 + max((o for p, o, _t, _k in recs if p == q), default=0)]] for q in (0, 1)}
    info = {"covers": {"topic": "orders", "from_ms": lo_ms, "to_ms": hi_ms, "offsets": runs}}
    eb.register_build(idx, name, attempt, [sb._manifest(dst, key, stem, crc, size, stats.items, begin)], info)


@pytest.fixture
def url(store_url_factory: Callable[[str], str]) -> str:
    return store_url_factory("s3")


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(histories(), st.booleans(), st.lists(st.tuples(st.sampled_from([f"k{i}" for i in range(13)]),
                                                     st.integers(0, 300), st.integers(0, 300), st.integers(1, 8)),
                                           min_size=4, max_size=10))
def test_a_build_supersedes_the_files_it_covers(tmp_path_factory: pytest.TempPathFactory, url: str,
                                                drawn: tuple[list[Record], int, int], aligned: bool,
                                                asks: list[tuple[str, int, int, int]]) -> None:
    recs, a, b = drawn
    tmp = tmp_path_factory.mktemp("build")
    idx = tmp / "idx"
    store_url = url.replace("?", f"-{uuid.uuid4().hex[:8]}?", 1) if "?" in url else f"{url}-{uuid.uuid4().hex[:8]}"
    clock = ManualClock(T0 + 10_000)
    svc = open_service(idx, store_url, clock, max_items=8, merge_tiers_ms=(), merge_grace_ms=GRACE_MS)
    store = open_store(store_url)
    try:
        for q, o, t, k in recs:
            svc.put("orders", q, o, 10, [k], t)
        svc.flush()
        svc.roll()
        svc.maintain()
        files = sorted((f for f in svc.files() if f.items), key=lambda f: f.min_ms)
        assert all(f.state is FileState.UPLOADED for f in files)
        if aligned:  # the build's range on file boundaries: from the oldest entry of one file past another's newest
            i, j = sorted((a % len(files), (b - 1) % len(files)))
            lo_ms, hi_ms = files[i].min_ms, files[j].end_ms + 1
        else:
            lo_ms, hi_ms = recs[a][2], recs[b - 1][2] + 1
        queries = [(k, T0 + x, T0 + x + y, m) for k, x, y, m in asks] + [("k3", 0, 1 << 62, 100)]
        before = [_ask(svc, *qq) for qq in queries]
        assert before == [_answer(recs, *qq) for qq in queries]
        _register(tmp, idx, store, recs, lo_ms, hi_ms)
        svc.maintain()  # adopts the build
        assert [_ask(svc, *qq) for qq in queries] == before
        served = [f for f in svc.files() if f.items]
        own = [f for f in served if not f.name.startswith("b")]
        superseded = [f for f in files if f.name not in {g.name for g in own}]
        assert all(not (lo_ms <= f.min_ms and f.end_ms < hi_ms) for f in own)  # none wholly inside is served
        assert all(lo_ms <= f.min_ms and f.end_ms < hi_ms for f in superseded)
        # files roll by count in put order: each holds the next `items` records
        slices, at = {}, 0
        for f in sorted(files, key=lambda f: f.begin_ms):
            slices[f.name], at = recs[at:at + f.items], at + f.items
        cut = sum(1 for f in own for _q, _o, t, _k in slices[f.name] if lo_ms <= t < hi_ms)
        assert sum(f.items for f in served) == len(recs) + cut  # each entry once, but those of the files cut
        # the superseded files' objects stay for the grace, then go
        keys = [f.location for f in superseded]
        assert all(store.exists(k) for k in keys)
        clock.advance(GRACE_MS)
        svc.maintain()
        assert not any(store.exists(k) for k in keys)
        assert [_ask(svc, *qq) for qq in queries] == before
    finally:
        svc.close()
    again = open_service(idx, store_url, clock, max_items=8, merge_tiers_ms=())
    try:
        assert [_ask(again, *qq) for qq in queries] == before
    finally:
        again.close()
        store.close()



def test_a_build_covers_the_offset_runs_it_read_only_with_every_key_kind() -> None:
    from jobs.spark_build import BuildPlan, PartTask

    tasks = [PartTask(0, 1, "o1", 10, 0, 50), PartTask(0, 1, "o2", 10, 50, 80), PartTask(0, 1, "o4", 10, 90, 95),
             PartTask(2, 3, "o3", 10, 7, 9)]
    plan = BuildPlan(name="ab12", attempt="cd34", topic="orders", topic_id=1, partitions=[0, 2], from_ms=5,
                     to_ms=99, kinds=("key", "keys", "uniq"), tasks=tasks, objects=4, offsets=90, pruned=0)
    from broker.partitions.record_entries import ALL_KINDS

    plan.kinds = ALL_KINDS
    assert plan.describe()["covers"] == {"topic": "orders", "from_ms": 5, "to_ms": 99,
                                         "offsets": {"0": [[0, 80], [90, 95]], "2": [[7, 9]]}}
    plan.kinds = ALL_KINDS[:1]  # a build of some key kinds only holds part of what the files hold: covers nothing
    assert "covers" not in plan.describe()
