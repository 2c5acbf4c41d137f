"""Hypothesis: random puts and queries against a plain-Python model, for both formats, unsealed and
compacted; random corruption of native files is always detected, and never escapes as anything but
a FormatError from the RocketMQ codec."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from index_file import (
    BytesSource,
    CompactedIndexReader,
    FormatError,
    IndexEntry,
    NativeIndexWriter,
    RocketMQIndexReader,
    RocketMQIndexWriter,
    compact,
    compact_rocketmq,
)

from .helpers import as_rows, expected, expected_rocketmq

BEGIN = 1_700_000_000_000
TOPICS = ["orders", "pay", "a#"]
KEYS = ["Aa", "BB", "C#", "order-1", "order-2", "uuid-\u00e9", "\U0001f600", ""]

entry_st = st.builds(
    IndexEntry,
    topic=st.sampled_from(TOPICS),
    queue_id=st.integers(0, 3),
    offset=st.integers(0, 40),  # small: repeated (queue, offset) pairs exercise de-duplication
    size=st.integers(0, 2 ** 31 - 1),
    store_time_ms=st.integers(BEGIN - 5_000, BEGIN + 20_000),
    keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=3).map(tuple),
)
query_st = st.tuples(st.sampled_from(TOPICS), st.sampled_from(KEYS), st.integers(0, 12),
                     st.integers(BEGIN - 6_000, BEGIN + 21_000), st.integers(0, 30_000))

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _batches(es: list[IndexEntry], cuts: list[int]) -> list[list[IndexEntry]]:
    out, last = [], 0
    for c in sorted(set(min(c, len(es)) for c in cuts)) + [len(es)]:
        out.append(es[last:c])
        last = c
    return out


@SETTINGS
@given(es=st.lists(entry_st, max_size=60), cuts=st.lists(st.integers(0, 60), max_size=4),
       slots=st.integers(1, 9), ipb=st.integers(1, 7), queries=st.lists(query_st, min_size=1, max_size=12))
def test_native_matches_model(es: list[IndexEntry], cuts: list[int], slots: int, ipb: int,
                              queries: list[tuple[str, str, int, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        p, c = Path(d) / "w", Path(d) / "c"
        w = NativeIndexWriter.create(p, BEGIN, slots=slots, max_items=200)
        for b in _batches(es, cuts):
            assert w.put_batch(b) == len(b)

        def check(reader: object) -> None:
            for topic, key, mx, lo, span in queries:
                got = reader.query(topic, key, mx, lo, lo + span)  # type: ignore[attr-defined]
                assert as_rows(got) == expected(es, topic, key, mx, lo, lo + span)
                assert all(h.exact and h.key == key and h.topic == topic for h in got)

        check(w)
        w.close()
        w = NativeIndexWriter.open(p)  # recovered
        check(w)
        w.seal()
        check(w)
        w.close()
        compact(p, c, items_per_block=ipb)
        with CompactedIndexReader(c) as r:
            check(r)
        # the remote code path: CRC per read, no whole-file verification
        with CompactedIndexReader(BytesSource(c.read_bytes(), "remote"), verify_blocks=False) as r:
            check(r)


@SETTINGS
@given(es=st.lists(entry_st, max_size=40), slots=st.integers(1, 9), max_items=st.integers(2, 60),
       queries=st.lists(query_st, min_size=1, max_size=12))
def test_rocketmq_matches_model(es: list[IndexEntry], slots: int, max_items: int,
                                queries: list[tuple[str, str, int, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        p, c = Path(d) / "w", Path(d) / "c"
        w = RocketMQIndexWriter.create(p, BEGIN, slots=slots, max_items=max_items)
        stored = w.put_batch(es)
        # RocketMQ's rule: an entry fits while count + its keys < max items
        count, fits = 0, 0
        for e in es:
            k = len(dict.fromkeys(e.keys))
            if count + k >= max_items:
                break
            count, fits = count + k, fits + 1
        assert stored == fits and w.item_count == count
        kept = es[:stored]

        def check(reader: object) -> None:
            for topic, key, mx, lo, span in queries:
                got = reader.query(topic, key, mx, lo, lo + span)  # type: ignore[attr-defined]
                assert as_rows(got) == expected_rocketmq(kept, BEGIN, topic, key, mx, lo, lo + span)

        check(w)
        w.seal()
        w.close()
        with RocketMQIndexReader(p, slot_count=slots, layout="unsealed") as r:
            check(r)
        compact_rocketmq(p, c, slot_count=slots)
        with RocketMQIndexReader(c, slot_count=slots) as r:
            assert r.layout == "compacted"
            check(r)
        with RocketMQIndexReader(BytesSource(c.read_bytes(), "remote")) as r:  # slot count from the size
            check(r)


def _native_files(d: Path) -> tuple[bytes, bytes, list[tuple[str, str]]]:
    es = [IndexEntry(TOPICS[i % 3], i % 4, i, 10 + i, BEGIN + 37 * i, (KEYS[i % len(KEYS)], f"u{i}"))
          for i in range(150)]
    w = NativeIndexWriter.create(d / "s", BEGIN, slots=13, max_items=400)
    w.put_batch(es[:70])
    w.put_batch(es[70:])
    w.seal()
    w.close()
    compact(d / "s", d / "c", items_per_block=16)
    pairs = sorted({(e.topic, k) for e in es for k in e.keys})
    return (d / "s").read_bytes(), (d / "c").read_bytes(), pairs


_FILES: dict[str, tuple[bytes, bytes, list[tuple[str, str]]]] = {}


def native_files() -> tuple[bytes, bytes, list[tuple[str, str]]]:
    if "x" not in _FILES:
        with tempfile.TemporaryDirectory() as d:
            _FILES["x"] = _native_files(Path(d))
    return _FILES["x"]


corruption_st = st.one_of(
    st.tuples(st.just("flip"), st.floats(0, 1, exclude_max=True), st.integers(1, 255)),
    st.tuples(st.just("cut"), st.floats(0, 1, exclude_max=True), st.just(0)),
)


def corrupt(data: bytes, how: tuple[str, float, int]) -> bytes:
    kind, where, mask = how
    pos = int(where * len(data))
    if kind == "cut":
        return data[:pos]
    out = bytearray(data)
    out[pos] ^= mask
    return bytes(out)


@settings(max_examples=150, deadline=None)
@given(how=corruption_st)
def test_corrupt_sealed_native_file_is_detected(how: tuple[str, float, int]) -> None:
    sealed, _compacted, _pairs = native_files()
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "bad.idx"
        p.write_bytes(corrupt(sealed, how))
        try:
            w = NativeIndexWriter.open(p)
        except FormatError as exc:
            assert str(p) in str(exc)
        else:
            w.close()
            raise AssertionError(f"{how} went unnoticed")


@settings(max_examples=150, deadline=None)
@given(how=corruption_st, local=st.booleans())
def test_corrupt_compacted_native_file_is_detected(how: tuple[str, float, int], local: bool) -> None:
    _sealed, compacted, pairs = native_files()
    bad = corrupt(compacted, how)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "bad.cidx"
        p.write_bytes(bad)
        try:
            # local: verified whole at open; remote path: each query checks the blocks it reads
            r = CompactedIndexReader(p) if local else CompactedIndexReader(BytesSource(bad, str(p)),
                                                                           verify_blocks=False)
            for topic, key in pairs:
                r.query(topic, key, 1000)
            if not local and how[0] == "cut":
                raise AssertionError("a truncated object must not load")
        except FormatError as exc:
            assert str(p) in str(exc)
        else:
            raise AssertionError(f"{how} went unnoticed")


@settings(max_examples=100, deadline=None)
@given(how=corruption_st, compacted=st.booleans())
def test_corrupt_rocketmq_file_fails_only_with_format_error(how: tuple[str, float, int], compacted: bool) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "r"
        w = RocketMQIndexWriter.create(p, BEGIN, slots=7, max_items=60)
        w.put_batch([IndexEntry(TOPICS[i % 3], 0, i, 1, BEGIN + 1000 * i, (KEYS[i % 8],)) for i in range(40)])
        w.seal()
        w.close()
        if compacted:
            compact_rocketmq(p, Path(d) / "c", slot_count=7)
            p = Path(d) / "c"
        bad = corrupt(p.read_bytes(), how)
        try:
            r = RocketMQIndexReader(BytesSource(bad, "bad"), slot_count=7,
                                    layout="compacted" if compacted else "unsealed")
            for t in TOPICS:
                for k in KEYS:
                    assert isinstance(r.query(t, k, 100), list)
        except FormatError:
            pass
