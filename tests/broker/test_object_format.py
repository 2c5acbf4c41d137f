"""Object format codec: byte layout, round trips (hypothesis), corrupt objects, ranged reads."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.errors import ObjectFormatError
from broker.objects.format import (
    FOOTER_MAGIC,
    StreamRecord,
    decode_block,
    object_key,
)
from broker.objects.reader import ObjectReader
from broker.objects.writer import ObjectWriter, write_object
from storage_tier import open_store

# one record (stream 3, epoch 0, offsets [4, 6), payload "ab") in one block, written out by hand from the spec
GOLDEN = bytes.fromhex(
    "5a02" "00000001" "00000023"  # block: magic, flag, 1 record, 35 data bytes
    "22" "0000000000000003" "0000000000000000" "0000000000000004" "00000002" "00000002" "6162"
    "0000000000000003" "0000000000000004" "00000002" "00000001" "0000000000000000" "0000002d"  # index entry
    "000000000000002d" "00000024" + "00" * 28 + "88e241b785f4cff7"  # footer
)


@pytest.fixture
def local(tmp_path: Path):  # type: ignore[no-untyped-def]
    s = open_store(f"file://{tmp_path}/blobs")
    yield s
    s.close()


def test_object_key_layout() -> None:
    assert object_key(1, "_kafka_c1") == "10000000/_kafka_c1/1"
    assert object_key(78, "_kafka_HevPZiuuSiiyUU6ylL3C6Q") == "e4000000/_kafka_HevPZiuuSiiyUU6ylL3C6Q/78"
    assert object_key(0x12345678, "ns") == "87654321/ns/305419896"


def test_golden_bytes(local) -> None:  # type: ignore[no-untyped-def]
    info = write_object(local, "o/1", [StreamRecord(3, 0, 4, 2, b"ab")])
    assert local.get("o/1") == GOLDEN
    assert info.size == len(GOLDEN) == 45 + 36 + 48
    r = ObjectReader(local, "o/1")
    assert (r.footer.index_position, r.footer.index_length) == (45, 36)
    assert r.read(3, 0, 100) == [StreamRecord(3, 0, 4, 2, b"ab")]


def test_blocks_close_at_block_size_and_on_stream_change(local) -> None:  # type: ignore[no-untyped-def]
    payload = b"x" * 15556
    recs = [StreamRecord(4, 0, 50390 + 15 * i, 15, payload) for i in range(136)]
    recs.insert(0, StreamRecord(3, 0, 4, 2, b"y" * 100))
    recs.append(StreamRecord(5, 1, 8376, 12, b"z" * 50))
    info = write_object(local, "big", recs)
    idx = info.index
    # the AutoMQ article's object 78: 68 records of 15556 bytes make a 1060062-byte block
    assert [(e.stream_id, e.record_count, e.size) for e in idx] == [
        (3, 1, 10 + 33 + 100), (4, 68, 1060062), (4, 68, 1060062), (5, 1, 10 + 33 + 50)]
    assert (idx[1].start_offset, idx[1].end_offset, idx[2].end_offset) == (50390, 51410, 52430)
    assert [e.position for e in idx] == [0, 143, 143 + 1060062, 143 + 2 * 1060062]
    assert [(r.stream_id, r.start_offset, r.end_offset) for r in info.ranges] == [
        (3, 4, 6), (4, 50390, 52430), (5, 8376, 8388)]


stream_batches = st.lists(
    st.tuples(
        st.integers(0, 2**40),  # stream id
        st.integers(0, 2**40),  # first offset
        st.lists(st.tuples(st.integers(1, 50), st.binary(max_size=300), st.booleans()), min_size=1, max_size=30),
    ),
    min_size=1, max_size=6, unique_by=lambda t: t[0],
)


def _records(spec: list[tuple[int, int, list[tuple[int, bytes, bool]]]]) -> list[StreamRecord]:
    out = []
    for sid, first, batches in sorted(spec):
        off = first
        for count, payload, gap in batches:
            off += 7 if gap else 0  # an offset gap forces a new block
            out.append(StreamRecord(sid, sid % 5, off, count, payload))
            off += count
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=stream_batches, block_size=st.integers(1, 2000), tail=st.integers(48, 400), data=st.data())
def test_round_trip_and_ranged_reads(local, spec, block_size, tail, data) -> None:  # type: ignore[no-untyped-def]
    recs = _records(spec)
    info = write_object(local, "rt", recs, block_size=block_size, part_size=1500)
    assert info.size == local.size("rt")
    r = ObjectReader(local, "rt", size=info.size, tail_read=tail)
    assert r.index == info.index
    assert [x for _, blk in r.iter_all() for x in blk] == recs
    # a random sub-range of one stream returns exactly the overlapping records
    sid = data.draw(st.sampled_from(sorted({x.stream_id for x in recs})))
    mine = [x for x in recs if x.stream_id == sid]
    lo = data.draw(st.integers(mine[0].base_offset - 3, mine[-1].last_offset + 3))
    hi = data.draw(st.integers(lo, mine[-1].last_offset + 5))
    assert r.read(sid, lo, hi) == [x for x in mine if x.last_offset > lo and x.base_offset < hi]
    local.delete("rt")


def test_reads_only_the_needed_blocks(local) -> None:  # type: ignore[no-untyped-def]
    recs = [StreamRecord(s, 0, 100 * i, 100, bytes([i]) * 1000) for s in (1, 2) for i in range(20)]
    info = write_object(local, "sel", recs, block_size=3000)  # 3 records per block
    r = ObjectReader(local, "sel", size=info.size)
    before = local.meter.snapshot()
    got = r.read(2, 650, 700)
    delta = local.meter.snapshot() - before
    assert [x.base_offset for x in got] == [600]
    assert delta["GET"] == 1 and delta.bytes_out == 3 * (1000 + 33) + 10
    before = local.meter.snapshot()
    got = r.read(1, 0, 2000)  # the whole stream: its 7 adjacent blocks in one GET
    assert len(got) == 20 and (local.meter.snapshot() - before)["GET"] == 1


def test_writer_rejects_out_of_order(local) -> None:  # type: ignore[no-untyped-def]
    w = ObjectWriter(local, "ooo")
    w.write(StreamRecord(2, 0, 10, 5, b""))
    with pytest.raises(ValueError, match="order"):
        w.write(StreamRecord(1, 0, 0, 5, b""))
    with pytest.raises(ValueError, match="order"):
        w.write(StreamRecord(2, 0, 12, 5, b""))
    w.abort()
    assert not local.exists("ooo")


def test_writer_multipart_abort_leaves_nothing(local) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(RuntimeError), ObjectWriter(local, "aborted", block_size=100, part_size=200) as w:
        for i in range(20):
            w.write(StreamRecord(1, 0, i, 1, b"p" * 90))
        raise RuntimeError("upload interrupted")
    assert local.list("") == []


def _corrupt(local, name: str, data: bytes) -> str:  # type: ignore[no-untyped-def]
    local.put(name, data)
    return name


@pytest.mark.parametrize("mutate,check", [
    (lambda b: b[:-1], "footer"),  # truncated: the footer no longer ends the object
    (lambda b: b[:30], "truncated footer"),
    (lambda b: b[:-8] + struct.pack(">Q", FOOTER_MAGIC ^ 1), "bad footer magic"),
    (lambda b: b[:-40] + struct.pack(">i", 35) + b[-36:], "bad index length"),
    (lambda b: b[:-40] + struct.pack(">i", 72) + b[-36:], "bad index position"),
    (lambda b: b[:-48 - 36] + b"\xff" * 36 + b[-48:], "bad index entry"),
    (lambda b: b"\x00" + b[1:], "bad block magic"),
    (lambda b: b[:6] + struct.pack(">i", 99) + b[10:], "bad block length"),
    (lambda b: b[:10] + b"\x21" + b[11:], "bad record magic"),
    (lambda b: b[:39] + struct.pack(">i", 9999) + b[43:], "bad record"),
    (lambda b: b[:35] + struct.pack(">i", 3) + b[39:], "does not match its index entry"),
])
def test_corrupt_objects_give_clear_errors(local, mutate, check) -> None:  # type: ignore[no-untyped-def]
    key = _corrupt(local, "bad/obj", mutate(GOLDEN))
    with pytest.raises(ObjectFormatError) as ei:
        ObjectReader(local, key).read(3, 0, 100)
    assert check in str(ei.value) and "bad/obj" in str(ei.value)
    assert ei.value.key == "bad/obj"


def test_decode_block_garbage_never_raises_struct_errors() -> None:
    for n in range(0, 60):
        blob = (GOLDEN[:45] * 2)[:n]
        try:
            decode_block("k", blob)
        except ObjectFormatError:
            pass


def test_stream_object_on_seaweedfs_multipart(seaweedfs) -> None:  # type: ignore[no-untyped-def]
    s3 = open_store(seaweedfs.store_url("mqindex", "objfmt"))
    recs = [StreamRecord(9, 2, i * 10, 10, bytes([i % 251]) * 300_000) for i in range(40)]  # ~12 MB
    key = object_key(7, "_kafka_test")
    info = write_object(s3, key, recs)
    assert s3.size(key) == info.size
    r = ObjectReader(s3, key, size=info.size)
    assert len(r.index) == 10  # 4 records of 300 KB reach 1 MiB
    before = s3.meter.snapshot()
    got = r.read(9, 205, 215)
    assert [x.base_offset for x in got] == [200, 210]
    assert (s3.meter.snapshot() - before)["GET"] == 1
    s3.delete(key)
    s3.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=4),
       cut=st.one_of(st.none(), st.integers(0, 10_000)))
def test_fuzzed_objects_fail_only_with_object_format_error(local, flips, cut) -> None:  # type: ignore[no-untyped-def]
    recs = [StreamRecord(s, 0, 10 * i, 10, bytes([i]) * 40) for s in (1, 2) for i in range(6)]
    write_object(local, "fuzz/good", recs, block_size=120)
    data = bytearray(local.get("fuzz/good"))
    for pos, x in flips:
        data[pos % len(data)] ^= x
    if cut is not None:
        data = data[:cut % (len(data) + 1)]
    local.put("fuzz/bad", bytes(data))
    try:
        r = ObjectReader(local, "fuzz/bad", tail_read=100)
        for sid in (1, 2):
            r.read(sid, 0, 1000)
        list(r.iter_all())
    except ObjectFormatError as exc:
        assert "fuzz/bad" in str(exc)
