"""Executor side: the rows of one task's splits, read with ranged GETs straight from the object store.

Rows are those Spark's Kafka source gives, in offset order per partition: (key, value, topic, partition,
offset, timestamp, timestampType, headers). Each object is opened once per task (footer and index: one
GET, usually), then only the blocks overlapping a split's offsets are fetched (adjacent blocks in one
ranged GET, `broker/objects/reader.py`). Batches are decoded as the broker stored them, so a row is what
a Kafka consumer decodes from the same bytes: a batch's compression is undone, a LogAppendTime batch's
records carry its max timestamp, control batches (transaction markers) give no row. Spark is handed Arrow
record batches whose columns are read in C from the batches' record bytes (arrow_decode.py); the tuples of
`read_splits` come from aiokafka's reader, one record at a time (the reference the columnar decode is
tested against, and the path taken when the compiled module is not built).
"""

from __future__ import annotations

import datetime as dt
import gc
import itertools
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from broker.objects.reader import ObjectReader, RangeSource
from broker.partitions.records import batch_records, batch_slices
from jobs.spark_source import arrow_decode
from jobs.spark_source.plan import Split
from storage_tier import BlobStore, open_store

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MS = dt.timedelta(milliseconds=1)

ARROW_ROWS = 8192  # rows per Arrow record batch handed to Spark (about: whole Kafka batches are decoded)
ARROW_BYTES = 8 << 20  # record bytes decoded into one Arrow record batch, at most (about)

_STORES: dict[str, BlobStore] = {}
_STORES_LOCK = threading.Lock()


def worker_store(url: str) -> BlobStore:
    """One store client per URL per Python worker (workers are reused across tasks)."""
    with _STORES_LOCK:
        s = _STORES.get(url)
        if s is None:
            s = _STORES[url] = open_store(url)
        return s


def settle_worker_heap() -> None:
    """Executor, at the end of a task: collect, then freeze what survives. PySpark's daemon runs a full
    gc.collect() after every task of a reused Python worker, and a full collection walks every object the
    worker holds: pyarrow, pyspark.sql and the source imported after the fork, boto3's service models loaded
    by the store client (hundreds of thousands of objects), again for every task. Frozen objects are skipped
    by later collections (and still freed by reference counting); objects created later are collected as
    usual. The same settling as the index build's tasks (jobs/spark_build/extract.settle_worker_heap)."""
    gc.collect()
    gc.freeze()


def ms_to_datetime(ms: int) -> dt.datetime:
    return _EPOCH + ms * _MS


Row = tuple[Any, ...]


def _rows(reader: ObjectReader, split: Split, entries: list[Any], lo_ms: int | None, hi_ms: int | None,
          offsets: set[int] | None, keys: set[bytes] | None, not_null: frozenset[str]) -> Iterator[Row]:
    need_key, need_value = "key" in not_null, "value" in not_null
    topic, partition = split.topic, split.partition
    for _, records in reader.read_blocks(entries):
        for sr in records:
            if sr.last_offset <= split.start or sr.base_offset >= split.end:
                continue
            for pos, h, raw in batch_slices(sr.payload):
                if h.is_control or h.next_offset <= split.start or h.base_offset >= split.end:
                    continue
                for r in batch_records(raw, h, pos):
                    off = r.offset
                    if off < split.start or off >= split.end:
                        continue
                    if offsets is not None and off not in offsets:
                        continue
                    if keys is not None and r.key not in keys:
                        continue
                    if (need_key and r.key is None) or (need_value and r.value is None):
                        continue
                    ts = r.timestamp
                    if (lo_ms is not None and ts < lo_ms) or (hi_ms is not None and ts >= hi_ms):
                        continue
                    yield (r.key, r.value, topic, partition, off, ts, r.timestamp_type,
                           [(k, v) for k, v in r.headers] if r.headers else [])


def read_splits(store: RangeSource, splits: Iterable[Split], lo_ms: int | None = None, hi_ms: int | None = None,
                offsets: dict[tuple[str, int], set[int]] | None = None, keys: set[bytes] | None = None,
                not_null: frozenset[str] = frozenset()) -> Iterator[Row]:
    """Rows as Spark takes them (`timestamp` a UTC datetime); see `records` for the arguments."""
    yield from spark_rows(records(store, splits, lo_ms, hi_ms, offsets, keys, not_null))


def spark_rows(rows: Iterable[Row]) -> Iterator[Row]:
    """Rows of `records` (timestamps in ms) as Spark takes them: the timestamp a UTC datetime."""
    for r in rows:
        yield r[:5] + (ms_to_datetime(r[5]),) + r[6:]


def arrow_batches(store: RangeSource, splits: Iterable[Split], lo_ms: int | None = None, hi_ms: int | None = None,
                  offsets: dict[tuple[str, int], set[int]] | None = None, keys: set[bytes] | None = None,
                  not_null: frozenset[str] = frozenset(), rows: int = ARROW_ROWS,
                  columnar: bool | None = None) -> Iterator[Any]:
    """The rows of `read_splits` as pyarrow record batches of the source's Arrow schema. With the compiled
    decoder (`columnar`, the default when it is built) the records' columns are read in C straight into Arrow
    buffers (arrow_decode.py); without it the per-record rows are gathered a column at a time."""
    if columnar is None:
        columnar = arrow_decode.AVAILABLE
    if columnar:
        yield from _columnar_batches(store, splits, lo_ms, hi_ms, offsets, keys, not_null, rows)
        return

    yield from rows_to_batches(records(store, splits, lo_ms, hi_ms, offsets, keys, not_null), rows)


def rows_to_batches(it: Iterable[Row], rows: int = ARROW_ROWS) -> Iterator[Any]:
    """Rows of `records` (timestamps in ms) as pyarrow record batches of the source's schema, `rows` at most each."""
    import pyarrow as pa

    schema = arrow_schema()
    it = iter(it)
    while True:
        chunk = list(itertools.islice(it, rows))
        if not chunk:
            return
        cols = list(zip(*chunk, strict=True))
        arrays = [pa.array(cols[0], pa.binary()), pa.array(cols[1], pa.binary()), pa.array(cols[2], pa.string()),
                  pa.array(cols[3], pa.int32()), pa.array(cols[4], pa.int64()),
                  pa.array(cols[5], pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC")),
                  pa.array(cols[6], pa.int32()), pa.array(cols[7], schema.field("headers").type)]
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def _columnar_batches(store: RangeSource, splits: Iterable[Split], lo_ms: int | None, hi_ms: int | None,
                      offsets: dict[tuple[str, int], set[int]] | None, keys: set[bytes] | None,
                      not_null: frozenset[str], rows: int) -> Iterator[Any]:
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = arrow_schema()
    key_set = None if keys is None else pa.array(sorted(keys), pa.binary())

    def batch(chunk: arrow_decode.ArrowChunk, wanted: set[int] | None) -> Iterator[Any]:
        if not chunk.meta:
            return
        rb = chunk.record_batch(lo_ms, hi_ms)
        masks = []
        if wanted is not None:
            masks.append(pc.is_in(rb.column("offset"), value_set=pa.array(sorted(wanted), pa.int64())))
        if key_set is not None:
            masks.append(pc.is_in(rb.column("key"), value_set=key_set))
        masks += [pc.is_valid(rb.column(col)) for col in sorted(not_null & {"key", "value"})]
        if masks:
            mask = masks[0]
            for m in masks[1:]:
                mask = pc.and_(mask, m)
            rb = rb.filter(mask.fill_null(False))
        if rb.num_rows:
            yield rb

    reader: ObjectReader | None = None
    chunk: arrow_decode.ArrowChunk | None = None
    wanted: set[int] | None = None
    for split in splits:
        if reader is None or reader.key != split.key:
            reader = ObjectReader(store, split.key, size=split.size or None)
        picked = _entries(reader, split, offsets)
        if picked is None:
            continue
        entries, split_wanted = picked
        if chunk is not None and (chunk.topic != split.topic or offsets is not None):
            yield from batch(chunk, wanted)  # one topic per batch; a lookup's offsets are per partition
            chunk = None
        if chunk is None:
            chunk = arrow_decode.ArrowChunk(split.topic, schema)
        wanted = split_wanted
        where = f"object {split.key} (stream {split.stream_id}, {split.topic}/{split.partition})"
        for _, recs in reader.read_blocks(entries):
            for sr in recs:
                if sr.last_offset <= split.start or sr.base_offset >= split.end:
                    continue
                for pos, h, raw in batch_slices(sr.payload):
                    if h.is_control or h.next_offset <= split.start or h.base_offset >= split.end:
                        continue
                    chunk.add(raw, h, pos, split.partition, split.start, split.end, where)
                    if chunk.records >= rows or chunk.bytes >= ARROW_BYTES:
                        yield from batch(chunk, wanted)
    if chunk is not None:
        yield from batch(chunk, wanted)


def arrow_schema() -> Any:
    """The Arrow schema Spark expects of the source's record batches (its StructType, timestamps in UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from jobs.spark_source.schema import SCHEMA

    return to_arrow_schema(SCHEMA, timezone="UTC")


def records(store: RangeSource, splits: Iterable[Split], lo_ms: int | None = None, hi_ms: int | None = None,
                offsets: dict[tuple[str, int], set[int]] | None = None, keys: set[bytes] | None = None,
                not_null: frozenset[str] = frozenset()) -> Iterator[Row]:
    """(key, value, topic, partition, offset, timestamp ms, timestamp type, headers) of the records of the
    splits whose record timestamp is in [lo_ms, hi_ms). With `offsets` (per (topic, partition),
    the offsets an index lookup found), only the blocks holding those offsets are fetched and only those
    records given; with `keys`, only records whose key is one of them; `not_null` ("key", "value"): only
    records where those are not null."""
    reader: ObjectReader | None = None
    for split in splits:
        if reader is None or reader.key != split.key:
            reader = ObjectReader(store, split.key, size=split.size or None)
        picked = _entries(reader, split, offsets)
        if picked is not None:
            yield from _rows(reader, split, picked[0], lo_ms, hi_ms, picked[1], keys, not_null)


def _entries(reader: ObjectReader, split: Split, offsets: dict[tuple[str, int], set[int]] | None
             ) -> tuple[list[Any], set[int] | None] | None:
    """The object's index entries (blocks) to read for `split` and the offsets wanted of it (None: all); with
    `offsets`, only the blocks holding them (None when the split holds none)."""
    wanted = None if offsets is None else offsets.get((split.topic, split.partition), set())
    if wanted is None:
        return reader.entries_for(split.stream_id, split.start, split.end), None
    hits = sorted(o for o in wanted if split.start <= o < split.end)
    if not hits:
        return None
    seen: dict[tuple[int, int], Any] = {}
    for o in hits:
        for e in reader.entries_for(split.stream_id, o, o + 1):
            seen[(e.start_offset, e.position)] = e
    return [seen[k] for k in sorted(seen)], wanted
