"""Read-ahead of cold stream reads on SeaweedFS: the same records as a plain read, every block fetched once,
no read-ahead for one-offset lookups, and damage still reported at the same place, naming the object."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from broker.errors import ObjectFormatError
from broker.metadata import MetadataClient
from broker.objects.format import StreamRecord
from broker.objects.reader import ObjectReader
from broker.partitions.records import ProducerRecord, build_batch
from broker.streams.block_cache import BlockCache
from broker.streams.log_cache import LogCache
from broker.streams.stream_reader import StreamReader
from broker.streams.uploader import upload_batch
from storage_tier import open_store

PER = 5  # Kafka records per stream record


@pytest.fixture
def stream(seaweedfs, tmp_path: Path):  # type: ignore[no-untyped-def]
    """One stream of 90 stream records (~100 KB each, ~9 MiB) uploaded as one stream object."""
    store = open_store(seaweedfs.store_url("mqindex", f"readahead-{uuid.uuid4().hex[:8]}"))
    meta = MetadataClient(f"sqlite:///{tmp_path}/meta.sqlite", 0, namespace="_kafka_ra")
    meta.register_node()
    sid = meta.create_stream()
    meta.open_stream(sid, 0)
    cache = LogCache()
    written = []
    for i in range(90):
        off = i * PER
        payload = build_batch([ProducerRecord(bytes([(off + j) % 251]) * 20_000, b"k%d" % (off + j))
                               for j in range(PER)], base_offset=off)
        rec = StreamRecord(sid, 0, off, PER, payload)
        cache.append(rec)
        written.append(rec)
    res = upload_batch(cache.snapshot(), store, meta)
    (so,) = res.stream_objects
    yield store, meta, sid, written, meta.object_key(so.object_id)
    meta.close()
    store.close()


def sequential(reader: StreamReader, sid: int, end: int) -> list[StreamRecord]:
    out: list[StreamRecord] = []
    pos = 0
    while pos < end:
        got = reader.read(sid, pos, min(end, pos + 10 * PER), 1 << 20)  # pages of ~1 MiB, as a fetch asks
        assert got, f"no records at {pos}"
        out.extend(got)
        pos = got[-1].last_offset
    return out


def read_through(stream, readahead_bytes: int, get_bytes: int):  # type: ignore[no-untyped-def]
    """A sequential read of the whole stream with this read-ahead: the reader (closed) and the store's meter
    difference; the records read are the ones written."""
    store, meta, sid, written, _key = stream
    reader = StreamReader(store, meta, LogCache(), block_cache=BlockCache(64 << 20),
                          readahead_bytes=readahead_bytes, readahead_get_bytes=get_bytes)
    before = store.meter.snapshot()
    try:
        got = sequential(reader, sid, 90 * PER)
    finally:
        reader.close()
    assert [(r.base_offset, r.payload) for r in got] == [(r.base_offset, r.payload) for r in written]
    return reader, store.meter.snapshot() - before


def test_sequential_read_ahead_reads_each_block_once(stream) -> None:  # type: ignore[no-untyped-def]
    store, meta, sid, written, key = stream
    blocks = ObjectReader(store, key).index
    assert len(blocks) >= 6
    reader, d = read_through(stream, 4 << 20, 1 << 20)
    assert reader.readahead_gets > 0
    # the footer read, then each block at most once (read ahead or on demand, never both)
    object_size = store.size(key)
    assert d.bytes_out <= object_size + (64 << 10)
    assert d["GET"] <= 1 + len(blocks)


def test_one_offset_lookups_do_not_read_ahead(stream) -> None:  # type: ignore[no-untyped-def]
    store, meta, sid, written, _ = stream
    reader = StreamReader(store, meta, LogCache(), block_cache=BlockCache(64 << 20))
    try:
        (rec,) = reader.read(sid, 200, 201)
    finally:
        reader.close()
    assert rec.base_offset <= 200 < rec.last_offset
    assert reader.readahead_gets == 0


def test_damage_is_reported_where_a_plain_read_reports_it(stream) -> None:  # type: ignore[no-untyped-def]
    store, meta, sid, written, key = stream
    blocks = ObjectReader(store, key).index
    data = bytearray(store.get(key))
    bad = blocks[len(blocks) // 2]
    data[bad.position] ^= 0xFF  # the block magic
    store.put(key, bytes(data))

    def read_until_damage(readahead: int) -> tuple[int, str]:
        reader = StreamReader(store, meta, LogCache(), block_cache=BlockCache(64 << 20), readahead_bytes=readahead)
        pos = 0
        try:
            while True:
                got = reader.read(sid, pos, min(90 * PER, pos + 10 * PER), 1 << 20)
                pos = got[-1].last_offset
        except ObjectFormatError as exc:
            return pos, exc.key
        finally:
            reader.close()

    assert read_until_damage(4 << 20) == read_until_damage(0) == (bad.start_offset, key)


@pytest.mark.parametrize("read_end", [80 * PER, 38 * PER], ids=["read-asks-past-the-object", "page-ends-inside"])
def test_read_ahead_goes_on_into_the_next_object(seaweedfs, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                 read_end: int) -> None:
    store = open_store(seaweedfs.store_url("mqindex", f"readahead-{uuid.uuid4().hex[:8]}"))
    meta = MetadataClient(f"sqlite:///{tmp_path}/meta.sqlite", 0, namespace="_kafka_ra")
    meta.register_node()
    sid = meta.create_stream()
    meta.open_stream(sid, 0)
    written: list[StreamRecord] = []
    keys = []
    for part in range(2):  # two stream objects of 40 stream records (~4 MiB) each
        cache = LogCache()
        for i in range(40):
            off = (part * 40 + i) * PER
            payload = build_batch([ProducerRecord(bytes([(off + j) % 251]) * 20_000) for j in range(PER)],
                                  base_offset=off)
            rec = StreamRecord(sid, 0, off, PER, payload)
            cache.append(rec)
            written.append(rec)
        (so,) = upload_batch(cache.snapshot(), store, meta).stream_objects
        keys.append(meta.object_key(so.object_id))
    second = ObjectReader(store, keys[1])
    reader = StreamReader(store, meta, LogCache(), block_cache=BlockCache(64 << 20),
                          readahead_bytes=4 << 20, readahead_get_bytes=1 << 20)
    try:
        # from the first object's last three records: the read-ahead window reaches into the second object,
        # whether the read asks past the first object or, as a page does, ends inside it
        got = reader.read(sid, 37 * PER, read_end, 250_000)
        assert got[-1].last_offset == min(read_end, 40 * PER)
        first_block = second.index[0]
        deadline = time.monotonic() + 30
        while not reader.block_cache.contains(second_id(meta, sid), first_block.position):  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the next object's first block was not read ahead"
            time.sleep(0.05)
        everything = sequential(reader, sid, 80 * PER)
    finally:
        reader.close()
        meta.close()
        store.close()
    assert [(r.base_offset, r.payload) for r in everything] == [(r.base_offset, r.payload) for r in written]


def second_id(meta: MetadataClient, sid: int) -> int:
    """The object id holding the stream's offsets from 40 * PER on."""
    (ref,) = meta.get_objects(sid, 40 * PER, 40 * PER + 1, limit=1).objects
    return ref.object_id


def test_a_paging_reader_tops_the_window_up_a_whole_get_at_a_time(stream) -> None:  # type: ignore[no-untyped-def]
    """Pages of about one block slide the read-ahead window a block at a time; the read-ahead waits until a whole
    GET's worth is uncovered, so it asks the store in GETs of about `readahead_get_bytes`, not one per page."""
    store, meta, sid, written, key = stream
    blocks = ObjectReader(store, key).index
    get_bytes = 2 * max(e.size for e in blocks)  # two blocks a GET, a window of two blocks
    reader, d = read_through(stream, get_bytes, get_bytes)
    assert d.bytes_out <= store.size(key) + (64 << 10)
    # the footer, the first page's block, then runs of two blocks (a GET a block: 7 read-ahead GETs for 9 blocks)
    assert reader.readahead_gets <= (len(blocks) + 1) // 2
    assert d["GET"] <= 2 + (len(blocks) + 1) // 2
