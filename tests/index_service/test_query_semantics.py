"""Query contract of IndexService (DESIGN.md section 2), each rule a known RocketMQ defect."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from index_file import java_string_hash
from index_service import FileState, IndexService
from tests.index_service.helpers import ManualClock, Model, as_tuples, open_service


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000_000)


def _blob_url(tmp_path: Path) -> str:
    return f"file://{tmp_path}/blobs"


def test_exact_count_order_across_states(tmp_path: Path, clock: ManualClock) -> None:
    """Hits for a key spread over UPLOADED, COMPACTED, SEALED and WRITING files: exactly
    min(max_count, matches), store time desc then offset desc, for every max_count."""
    svc = open_service(tmp_path / "idx", _blob_url(tmp_path), clock, max_items=40)
    model = Model()
    rng = random.Random(7)
    off = 0
    try:
        for phase in range(4):
            for _ in range(35):
                t = clock.advance(rng.choice([0, 1, 3]))  # equal store times: the offset breaks ties
                keys = [rng.choice(["hot", "warm", "cold"]), f"u{off}"]
                svc.put("orders", off % 3, off, 10 + off, keys, t)
                model.add("orders", off % 3, off, 10 + off, t, keys)
                off += 1
            svc.flush()
            if phase < 3:
                svc.roll()
            if phase == 0:
                svc.maintain()  # the first files go all the way to UPLOADED
            elif phase == 1:
                for mf in svc.files_map.by_state(FileState.SEALED):
                    svc.lifecycle.compact(mf)  # these stop at COMPACTED
        states = {f.state for f in svc.files()}
        assert states == {FileState.UPLOADED, FileState.COMPACTED, FileState.SEALED, FileState.WRITING}
        for key in ("hot", "warm", "cold"):
            total = len(model.query("orders", key, 10_000))
            assert total > 20
            for max_count in (1, 2, 5, 17, total - 1, total, total + 1, 64, 1000):
                got = svc.query("orders", key, max_count)
                assert len(got) == min(max_count, total)
                assert as_tuples(got) == model.query("orders", key, max_count)
                assert all(h.exact and h.key == key and h.topic == "orders" for h in got)
        for i in range(0, off, 7):
            assert as_tuples(svc.query("orders", f"u{i}", 5)) == model.query("orders", f"u{i}", 5)
        assert svc.query("orders", "hot", 0) == []
        assert svc.query("other-topic", "hot", 10) == []
    finally:
        svc.close()


def _three_uploaded_files(tmp_path: Path, clock: ManualClock) -> IndexService:
    """Files A (times 100..), B (200..), C (300..), each holding 3 hits of `k`, all UPLOADED."""
    svc = open_service(tmp_path / "idx", _blob_url(tmp_path), clock, max_items=1000)
    off = 0
    for base in (100_000, 200_000, 300_000):
        for i in range(3):
            svc.put("t", 0, off, 1, ["k", f"x{off}"], base + i)
            off += 1
        svc.flush()
        svc.roll()
    svc.maintain()
    assert [f.state for f in svc.files()] == [FileState.UPLOADED] * 3 + [FileState.WRITING]  # an empty one
    return svc


def _gets(svc: IndexService) -> int:
    return svc.store.meter.snapshot()["GET"]  # type: ignore[attr-defined]


def test_global_counter_stops_before_older_files(tmp_path: Path, clock: ManualClock) -> None:
    svc = _three_uploaded_files(tmp_path, clock)
    try:
        before = _gets(svc)
        hits = svc.query("t", "k", 3)
        assert [h.store_time_ms for h in hits] == [300_002, 300_001, 300_000]
        assert _gets(svc) - before == 1  # only the newest file was read: one ranged GET
        before = _gets(svc)
        hits = svc.query("t", "k", 4)
        assert [h.store_time_ms for h in hits] == [300_002, 300_001, 300_000, 200_002]
        assert _gets(svc) - before == 2  # the oldest file could not contribute and was not read
        before = _gets(svc)
        assert len(svc.query("t", "k", 100)) == 9
        assert _gets(svc) - before == 3
        # a range that only the middle file overlaps: the other two are not touched
        before = _gets(svc)
        hits = svc.query("t", "k", 10, begin_ms=200_001, end_ms=250_000)
        assert [h.store_time_ms for h in hits] == [200_002, 200_001]
        assert _gets(svc) - before == 1
    finally:
        svc.close()


def test_file_searched_when_its_range_overlaps(tmp_path: Path, clock: ManualClock) -> None:
    """RocketMQ picks files by creation time; a file created after the range but holding records
    stored inside it (dispatch lag), or created before it, must still be searched."""
    svc = open_service(tmp_path / "idx", _blob_url(tmp_path), clock, max_items=1000)
    try:
        clock.now = 10_000_000
        svc.put("t", 0, 0, 1, ["late"], 5_000)  # stored long before the file was created
        svc.put("t", 0, 1, 1, ["early"], 10_000_500)
        svc.put("t", 0, 2, 1, ["early"], 10_009_000)  # the file spans its creation .. 10_009_000
        svc.flush()
        svc.roll()
        svc.maintain()
        f = svc.files()[0]
        assert f.state is FileState.UPLOADED
        assert f.begin_ms == 10_000_000 and f.min_ms == 5_000 and f.end_ms == 10_009_000
        assert [h.offset for h in svc.query("t", "late", 5, begin_ms=4_000, end_ms=6_000)] == [0]
        assert [h.offset for h in svc.query("t", "early", 5, begin_ms=10_008_000, end_ms=10_020_000)] == [2]
        assert svc.query("t", "early", 5, begin_ms=10_009_001) == []
    finally:
        svc.close()


def test_hash_collisions_never_leak(tmp_path: Path, clock: ManualClock) -> None:
    assert java_string_hash("t#Aa") == java_string_hash("t#BB")
    svc = open_service(tmp_path / "idx", _blob_url(tmp_path), clock, slots=1, max_items=1000)  # one slot: all chain
    try:
        svc.put("t", 0, 0, 1, ["Aa"], 1_000)
        svc.put("t", 0, 1, 1, ["BB"], 1_001)
        svc.put("t", 0, 2, 1, ["AaAa"], 1_002)
        svc.put("t", 0, 3, 1, ["BBBB"], 1_003)
        svc.flush()
        for state in ("writing", "uploaded"):
            assert [h.offset for h in svc.query("t", "Aa", 10)] == [0], state
            assert [h.offset for h in svc.query("t", "BB", 10)] == [1], state
            assert [h.offset for h in svc.query("t", "BBBB", 10)] == [3], state
            assert svc.query("t", "AaBB", 10) == [], state
            svc.roll()
            svc.maintain()
        assert svc.files()[0].state is FileState.UPLOADED
    finally:
        svc.close()


def test_no_duplicates_when_a_record_is_in_two_files(tmp_path: Path, clock: ManualClock) -> None:
    """A lost checkpoint makes the broker re-dispatch records already uploaded: the answer still
    holds each record once."""
    url = _blob_url(tmp_path)
    svc = open_service(tmp_path / "idx", url, clock, max_items=1000)
    for i in range(5):
        svc.put("t", 0, i, 1, ["dup"], 1_000 + i)
    svc.flush()
    svc.roll()
    svc.maintain()
    svc.close()
    (tmp_path / "idx" / "checkpoint.json").unlink()
    svc = open_service(tmp_path / "idx", url, clock, max_items=1000)
    try:
        assert svc.checkpoint("t", 0) is None
        for i in range(5):
            svc.put("t", 0, i, 1, ["dup"], 1_000 + i)
        svc.flush()
        assert sum(f.items for f in svc.files()) == 10  # really indexed twice
        hits = svc.query("t", "dup", 100)
        assert [h.offset for h in hits] == [4, 3, 2, 1, 0]
        assert [h.offset for h in svc.query("t", "dup", 3)] == [4, 3, 2]
    finally:
        svc.close()


def test_flush_makes_puts_queryable_and_checkpointed(tmp_path: Path, clock: ManualClock) -> None:
    svc = open_service(tmp_path / "idx", None, clock, max_items=100_000, flush_interval_ms=10_000, write_batch=10**6)
    try:
        svc.put_batch([("t", 3, i, 1, 5_000 + i, [f"k{i}"]) for i in range(1000)])
        svc.put("t", 3, 1000, 1, "k1000", 6_000, msg_id="MSGID-1000")
        svc.flush()
        assert [h.offset for h in svc.query("t", "k999", 5)] == [999]
        assert [h.offset for h in svc.query("t", "MSGID-1000", 5)] == [1000]
        assert svc.checkpoint("t", 3) == 1000
        assert svc.checkpoint("t", 4) is None
        # re-dispatched records (at or below the checkpoint) are not indexed twice
        items = sum(f.items for f in svc.files())
        svc.put_batch([("t", 3, i, 1, 5_000 + i, [f"k{i}"]) for i in range(990, 1001)])
        svc.flush()
        assert sum(f.items for f in svc.files()) == items
        assert svc.skipped_redispatched == 11
    finally:
        svc.close()


def test_an_empty_batch_and_a_first_batch_of_a_new_topic(tmp_path: Path) -> None:
    """An empty put_batch buffers nothing and is no error; the batch that names a topic first is written with
    the columns its check made (the writer's fast path), and its keys are found."""
    svc = open_service(tmp_path / "idx", None)
    try:
        assert svc.put_batch([]) == 0
        assert svc.put_batch([("new", q, o, 1, 1_000 + o, [f"k{q}-{o}"]) for q in range(3) for o in range(50)]) == 150
        assert svc.put_batch([]) == 0
        svc.flush()
        assert [(h.queue_id, h.offset) for h in svc.query("new", "k2-49", 5)] == [(2, 49)]
        assert [svc.checkpoint("new", q) for q in range(3)] == [49, 49, 49]
    finally:
        svc.close()


@pytest.mark.parametrize("record", [
    ("t#x", 0, 0, 1, 1, ["k"]), ("", 0, 0, 1, 1, ["k"]), ("t", -1, 0, 1, 1, ["k"]), ("t", 0, -5, 1, 1, ["k"]),
    ("t", 0, 0, 1, 1.5, ["k"]), ("t", 0, 0, 1, 1, [3]), ("t", 0, 0, 1, 1), ("t", "0", 0, 1, 1, ["k"]),
])
def test_bad_records_are_refused_and_nothing_is_buffered(tmp_path: Path, record: tuple) -> None:  # type: ignore[type-arg]
    svc = open_service(tmp_path / "idx", None)
    try:
        with pytest.raises(ValueError):
            svc.put_batch([("t", 0, 0, 1, 1, ["good"]), record])
        svc.flush()
        assert svc.query("t", "good", 5) == []
        assert svc.checkpoint("t", 0) is None
    finally:
        svc.close()
