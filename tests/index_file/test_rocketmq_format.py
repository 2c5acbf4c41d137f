"""The RocketMQ tiered IndexStoreFile codec: the facts from RocketMQ's own layout, byte for byte."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from index_file import (
    AppendResult,
    BytesSource,
    FormatError,
    IndexEntry,
    RocketMQIndexReader,
    RocketMQIndexWriter,
    compact_rocketmq,
    open_remote_rocketmq,
    rocketmq_hash,
)
from index_file.rocketmq_format import MAGIC_END, MAGIC_OPEN, item_position, slot_position
from storage_tier import open_store

BEGIN = 1_700_000_000_000


def entry(topic: str, key: str, offset: int = 666, t: int = BEGIN + 5_000, queue: int = 2) -> IndexEntry:
    return IndexEntry(topic, queue, offset, 1024, t, (key,))


def test_hash_of_topic_and_key() -> None:
    assert rocketmq_hash("TopicTest", "MessageKey") == 638347386


def test_slot_and_item_positions(tmp_path: Path) -> None:
    assert slot_position(2) == 44
    assert slot_position(5) == 28 + 8 * 5
    assert item_position(5, 2) == 28 + 40 + 64
    w = RocketMQIndexWriter.create(tmp_path / "f", BEGIN, slots=5, max_items=20)
    w.put(entry("TopicTest", "MessageKey"))
    w.close()
    raw = (tmp_path / "f").read_bytes()
    assert len(raw) == 28 + 5 * 8 + 20 * 32
    magic, begin, end, used, count = struct.unpack_from(">IqqII", raw, 0)
    assert (magic, begin, end, used, count) == (MAGIC_OPEN, BEGIN, BEGIN + 5_000, 1, 1)
    h = 638347386
    assert struct.unpack_from(">i", raw, slot_position(h % 5))[0] == 1  # head of the key's slot: item 1
    item = struct.unpack_from(">iiiqiii", raw, item_position(5, 1))
    assert item == (h, item[1], 2, 666, 1024, 5, 0)  # time diff in seconds, no next item
    assert raw[item_position(5, 0):item_position(5, 1)] == bytes(32)  # item 0 is never used


def test_five_topics_three_puts(tmp_path: Path) -> None:
    w = RocketMQIndexWriter.create(tmp_path / "f", BEGIN, slots=5, max_items=20)
    for i in range(5):
        for j in range(3):
            assert w.put(entry(f"TopicTest{i}", "MessageKey", offset=100 * i + j)) is AppendResult.SUCCESS
    assert w.used_slots == 5
    assert w.item_count == 15
    hits = w.query("TopicTest1", "MessageKey", 64, 0, BEGIN + 10_000)
    assert len(hits) == 3
    assert [h.offset for h in hits] == [102, 101, 100]
    assert not any(h.exact for h in hits)
    assert w.query("TopicTest1", "MessageKey", 2) == hits[:2]
    w.close()
    r = RocketMQIndexWriter.open(tmp_path / "f", slots=5)  # reopened: counts kept
    assert (r.item_count, r.used_slots, r.begin_ms) == (15, 5, BEGIN)
    assert len(r.query("TopicTest1", "MessageKey", 64)) == 3
    r.close()


def test_full_at_max_items_minus_one(tmp_path: Path) -> None:
    w = RocketMQIndexWriter.create(tmp_path / "f", BEGIN, slots=5, max_items=20)
    results = [w.put(entry("T", f"k{i}", offset=i)) for i in range(19)]
    assert results == [AppendResult.SUCCESS] * 19
    assert w.put(entry("T", "k19", offset=19)) is AppendResult.FULL
    assert w.item_count == 19
    assert w.full
    assert struct.unpack_from(">I", (tmp_path / "f").read_bytes(), 0)[0] == MAGIC_END
    assert w.query("T", "k19") == []
    w.close()


def test_put_batch_is_whole_entries(tmp_path: Path) -> None:
    w = RocketMQIndexWriter.create(tmp_path / "f", BEGIN, slots=3, max_items=6)
    entries = [IndexEntry("T", 0, i, 1, BEGIN, ("a", "b")) for i in range(4)]
    assert w.put_batch(entries) == 2  # 4 items stored; a third entry needs 2 more of the 1 left
    assert w.item_count == 4
    w.close()


def test_hash_collisions_are_false_positives(tmp_path: Path) -> None:
    assert rocketmq_hash("T", "Aa") == rocketmq_hash("T", "BB")
    w = RocketMQIndexWriter.create(tmp_path / "f", BEGIN, slots=7, max_items=10)
    w.put(entry("T", "Aa", offset=1))
    hits = w.query("T", "BB")
    assert [(h.offset, h.key, h.exact) for h in hits] == [(1, "BB", False)]  # by design: verify!
    w.close()


def _filled(tmp_path: Path) -> tuple[Path, Path]:
    src, dst = tmp_path / "src", tmp_path / "dst"
    w = RocketMQIndexWriter.create(src, BEGIN, slots=5, max_items=40)
    for i in range(30):
        w.put(entry(f"Topic{i % 4}", f"key{i % 7}", offset=i, t=BEGIN + 1000 * i))
    w.seal()
    w.close()
    compact_rocketmq(src, dst, slot_count=5)
    return src, dst


def test_compacted_layout_bytes(tmp_path: Path) -> None:
    src, dst = _filled(tmp_path)
    raw = dst.read_bytes()
    assert len(raw) == 28 + 5 * 8 + 28 * 30
    magic, begin, _end, used, count = struct.unpack_from(">IqqII", raw, 0)
    assert (magic, begin, used, count) == (MAGIC_END, BEGIN, 5, 30)
    unsealed = RocketMQIndexReader(src, slot_count=5, layout="unsealed")
    seen = 0
    for slot in range(5):
        pos, length = struct.unpack_from(">ii", raw, 28 + 8 * slot)
        assert length % 28 == 0
        run = [struct.unpack_from(">iiiqii", raw, p) for p in range(pos, pos + length, 28)]
        seen += len(run)
        assert all(h % 5 == slot for h, *_ in run)
        offsets = [r[3] for r in run]
        assert offsets == sorted(offsets, reverse=True)  # newest first
    assert seen == 30
    for t in range(4):
        for k in range(7):
            a = unsealed.query(f"Topic{t}", f"key{k}", 64)
            with RocketMQIndexReader(dst) as c:
                assert c.layout == "compacted"
                assert c.query(f"Topic{t}", f"key{k}", 64) == a
    unsealed.close()


def test_remote_compacted_two_gets_per_query(tmp_path: Path, store_url_factory) -> None:  # type: ignore[no-untyped-def]
    _src, dst = _filled(tmp_path)
    store = open_store(store_url_factory("s3"))
    store.put("idx/rmq", dst.read_bytes())
    local = RocketMQIndexReader(dst)
    reader = open_remote_rocketmq(store, "idx/rmq")
    for k in range(7):
        before = store.meter.snapshot()
        hits = reader.query("Topic1", f"key{k}", 64)
        assert (store.meter.snapshot() - before)["GET"] == (2 if hits else 1)
        assert hits == local.query("Topic1", f"key{k}", 64)
    store.close()


@pytest.mark.parametrize("cut", [0, 3, 27, 28 + 8 * 5 - 1, 28 + 8 * 5 + 28 * 30 - 1])
def test_truncated_compacted_file_is_a_format_error(tmp_path: Path, cut: int) -> None:
    _src, dst = _filled(tmp_path)
    data = dst.read_bytes()[:cut]
    with pytest.raises(FormatError) as info:
        r = RocketMQIndexReader(BytesSource(data, "cut.idx"), slot_count=5)
        for k in range(7):
            r.query("Topic1", f"key{k}", 64)
    assert "cut.idx" in str(info.value)


def test_foreign_file_is_a_format_error(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="magic"):
        RocketMQIndexReader(BytesSource(b"PK\x03\x04" + bytes(200), "zip"))


def test_bad_chain_pointer_is_a_format_error(tmp_path: Path) -> None:
    w = RocketMQIndexWriter.create(tmp_path / "f", BEGIN, slots=5, max_items=20)
    w.put(entry("T", "a", offset=1))
    w.put(entry("T", "a", offset=2))
    w.close()
    raw = bytearray((tmp_path / "f").read_bytes())
    struct.pack_into(">i", raw, item_position(5, 2) + 28, 7)  # item 2's next points forward
    with pytest.raises(FormatError, match="item chain"):
        RocketMQIndexReader(BytesSource(bytes(raw), "f"), slot_count=5).query("T", "a")
