"""A file only partly inside what a registered build indexed whole is read only for its part outside the build's
window (index_service/build_covers.py), on real SeaweedFS: Hypothesis draws histories, the build's window (cutting
files), the offset runs the build read (sometimes stopping short of the newest offsets, sometimes with a gap the
build did not read, whose entries it does not hold) and lookups (keys, time windows, max); answers equal the
history's, with the covers and with them ignored, warm and after a cold restart, and never cost more GETs than
reading such files whole. A lookup inside the window of a key a cut file holds reads the build's file only."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from index_file import NativeIndexWriter, compact
from index_service import FileState, IndexService
from index_service import external_builds as eb
from storage_tier import open_store
from tests.index_service.helpers import ManualClock, open_service
from tests.index_service.test_build_supersedes import T0, Record, _answer, _ask, histories

Runs = dict[int, list[list[int]]]


def _register(tmp: Path, idx: Path, store: Any, recs: list[Record], lo_ms: int, hi_ms: int, runs: Runs) -> None:
    """A build of every record stored in [lo_ms, hi_ms) at an offset of `runs`, registered with that cover."""
    from jobs import spark_build as sb

    name, attempt = uuid.uuid4().hex[:16], uuid.uuid4().hex[:12]
    inside = sorted((r for r in recs if lo_ms <= r[2] < hi_ms and any(a <= r[1] < b for a, b in runs.get(r[0], ()))),
                    key=lambda r: r[2])
    begin = inside[0][2] if inside else lo_ms
    stem = sb.build_stem(begin, name, attempt, 0)
    src, dst = tmp / f"{stem}.mqxu", tmp / f"{stem}.mqxc"
    w = NativeIndexWriter.create(src, begin, 64, max(1, len(inside)))
    w.put_batch([("orders", q, o, 10, t, [k]) for q, o, t, k in inside])
    w.seal()
    w.close()
    stats = compact(src, dst, items_per_block=16)
    key = sb.build_key(name, attempt, stem)
    size, crc = sb._upload(store, dst, key, 1 << 20, sb.abort_marker(name, attempt))
    info = {"covers": {"topic": "orders", "from_ms": lo_ms, "to_ms": hi_ms,
                       "offsets": {str(q): rs for q, rs in runs.items() if rs}}}
    eb.register_build(idx, name, attempt, [sb._manifest(dst, key, stem, crc, size, stats.items, begin)], info)


def _gets(svc: IndexService, q: tuple[str, int, int, int]) -> tuple[list[tuple[int, int, int]], int]:
    """The answer of a lookup asked twice and the GETs of the second (the files' headers are read by the first)."""
    _ask(svc, *q)
    before = svc.store.meter.snapshot()  # type: ignore[union-attr]
    answer = _ask(svc, *q)
    return answer, (svc.store.meter.snapshot() - before)["GET"]  # type: ignore[union-attr]


def _ignoring_covers(svc: IndexService, q: tuple[str, int, int, int]) -> tuple[list[tuple[int, int, int]], int]:
    """The same lookup as before covers existed: every file read whole."""
    saved = {mf.stem: mf.covers for mf in svc.files_map.files()}
    for mf in svc.files_map.files():
        mf.covers = []
    try:
        return _gets(svc, q)
    finally:
        for mf in svc.files_map.files():
            mf.covers = saved.get(mf.stem)


def _fill(svc: IndexService, recs: list[Record]) -> None:
    for q, o, t, k in recs:
        svc.put("orders", q, o, 10, [k], t)
    svc.flush()
    svc.roll()
    svc.maintain()
    assert all(f.state is FileState.UPLOADED for f in svc.files() if f.items)


@pytest.fixture
def url(store_url_factory: Callable[[str], str]) -> str:
    return store_url_factory("s3")


def _own_url(url: str) -> str:
    return url.replace("?", f"-{uuid.uuid4().hex[:8]}?", 1) if "?" in url else f"{url}-{uuid.uuid4().hex[:8]}"


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(histories(), st.integers(0, 100), st.integers(0, 100), st.booleans(), st.booleans(),
       st.lists(st.tuples(st.sampled_from([f"k{i}" for i in range(13)]), st.integers(0, 300), st.integers(0, 300),
                          st.integers(1, 8)), min_size=4, max_size=10))
def test_files_cut_by_a_build_are_read_only_outside_its_window(
        tmp_path_factory: pytest.TempPathFactory, url: str, drawn: tuple[list[Record], int, int], short: int,
        gap_at: int, gap: bool, to_end: bool, asks: list[tuple[str, int, int, int]]) -> None:
    recs, a, b = drawn
    tmp = tmp_path_factory.mktemp("covers")
    idx, store_url = tmp / "idx", _own_url(url)
    clock = ManualClock(T0 + 10_000)
    b = len(recs) if to_end else b  # sometimes up to the newest entries, which a build stopped short of misses
    lo_ms, hi_ms = recs[a][2], recs[b - 1][2] + 1  # cutting files
    runs: Runs = {}
    for q in (0, 1):
        top = 1 + max((o for p, o, _t, _k in recs if p == q), default=-1)
        end = max(0, top - short % 4)  # sometimes the build stopped short of the newest offsets
        runs[q] = [[0, end]] if end else []
        inside = [o for p, o, t, _k in recs if p == q and lo_ms <= t < hi_ms and 0 < o < end - 1]
        if gap and q == 0 and inside:  # a gap the build did not read, in its window: its entry is not in the build
            g = inside[gap_at % len(inside)]
            runs[q] = [[0, g], [g + 1, end]]
    svc = open_service(idx, store_url, clock, max_items=8, merge_tiers_ms=())
    store = open_store(store_url)
    queries = [(k, T0 + x, T0 + x + y, m) for k, x, y, m in asks] + [("k3", 0, 1 << 62, 100)] + [
        (f"k{i}", lo_ms, hi_ms - 1, 50) for i in range(12)]
    try:
        _fill(svc, recs)
        _register(tmp, idx, store, recs, lo_ms, hi_ms, runs)
        svc.maintain()  # adopts the build
        for q in queries:
            with_covers, gets = _gets(svc, q)
            whole, gets_whole = _ignoring_covers(svc, q)
            assert with_covers == whole == _answer(recs, *q), q
            assert gets <= gets_whole, q
    finally:
        svc.close()
    again = open_service(idx, store_url, clock, max_items=8, merge_tiers_ms=())
    try:  # cold: the covers are read back from the build's manifest
        assert all(mf.covers for mf in again.files_map.files() if eb.parse_build_stem(mf.stem))
        for q in queries:
            answer, gets = _gets(again, q)
            assert answer == _answer(recs, *q), q
            assert gets <= _ignoring_covers(again, q)[1], q
    finally:
        again.close()
        store.close()


def test_a_lookup_inside_the_window_reads_the_builds_file_only(tmp_path: Path, url: str) -> None:
    """Two files of 8 entries (times T0..T0+15); a build of [T0+4, T0+12) cuts both. A key of the first file's
    part inside the window, asked inside the window: only the build's file is read (before: both)."""
    recs: list[Record] = [(0, i, T0 + i, f"k{i}") for i in range(16)]
    idx, store_url = tmp_path / "idx", _own_url(url)
    clock = ManualClock(T0 + 10_000)
    svc = open_service(idx, store_url, clock, max_items=8, merge_tiers_ms=())
    store = open_store(store_url)
    try:
        _fill(svc, recs)
        assert len([f for f in svc.files() if f.items]) == 2
        _register(tmp_path, idx, store, recs, T0 + 4, T0 + 12, {0: [[0, 16]]})
        svc.maintain()
        assert len([f for f in svc.files() if f.items]) == 3  # both cut files stay served, beside the build's
        # inside the window: the build's file only; with no range the cut file's part outside the window is read too
        # (its filter cannot tell which part holds the key), as before
        for key, lo, hi, expect in (("k5", T0 + 4, T0 + 11, (1, 2)), ("k9", T0 + 6, T0 + 9, (1, 2)),
                                    ("k5", T0 + 5, T0 + 20, (1, 2)), ("k5", 0, 1 << 62, (2, 2))):
            answer, gets = _gets(svc, (key, lo, hi, 10))
            whole, gets_whole = _ignoring_covers(svc, (key, lo, hi, 10))
            assert answer == whole == _answer(recs, key, lo, hi, 10) and len(answer) == 1
            assert (gets, gets_whole) == expect, (key, lo, hi)
        # outside the window the cut file is read as before
        answer, gets = _gets(svc, ("k1", 0, 1 << 62, 10))
        assert answer == _answer(recs, "k1", 0, 1 << 62, 10) and gets == 1
    finally:
        svc.close()
        store.close()
