"""Executor side: the rows of one task's splits, read with ranged GETs straight from the object store.

Rows are those Spark's Kafka source gives, in offset order per partition: (key, value, topic, partition,
offset, timestamp, timestampType, headers). Each object is opened once per task (footer and index: one
GET, usually), then only the blocks overlapping a split's offsets are fetched (adjacent blocks in one
ranged GET, `broker/objects/reader.py`). Batches are decoded by aiokafka's C reader as the broker stored
them, so a row is what a Kafka consumer decodes from the same bytes: a batch's compression is undone, a
LogAppendTime batch's records carry its max timestamp, control batches (transaction markers) give no row.
"""

from __future__ import annotations

import datetime as dt
import itertools
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from broker.objects.reader import ObjectReader, RangeSource
from broker.partitions.records import batch_records, batch_slices
from jobs.spark_source.plan import Split
from storage_tier import BlobStore, open_store

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MS = dt.timedelta(milliseconds=1)

ARROW_ROWS = 8192  # rows per Arrow record batch handed to Spark

_STORES: dict[str, BlobStore] = {}
_STORES_LOCK = threading.Lock()


def worker_store(url: str) -> BlobStore:
    """One store client per URL per Python worker (workers are reused across tasks)."""
    with _STORES_LOCK:
        s = _STORES.get(url)
        if s is None:
            s = _STORES[url] = open_store(url)
        return s


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
    for r in records(store, splits, lo_ms, hi_ms, offsets, keys, not_null):
        yield r[:5] + (ms_to_datetime(r[5]),) + r[6:]


def arrow_batches(store: RangeSource, splits: Iterable[Split], lo_ms: int | None = None, hi_ms: int | None = None,
                  offsets: dict[tuple[str, int], set[int]] | None = None, keys: set[bytes] | None = None,
                  not_null: frozenset[str] = frozenset(), rows: int = ARROW_ROWS) -> Iterator[Any]:
    """The rows of `read_splits` as pyarrow record batches of the source's Arrow schema (what Spark's Python
    data source worker would build from the tuples, built a column at a time: no per-row conversion)."""
    import pyarrow as pa

    schema = arrow_schema()
    it = records(store, splits, lo_ms, hi_ms, offsets, keys, not_null)
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
        wanted = None if offsets is None else offsets.get((split.topic, split.partition), set())
        if wanted is not None:
            hits = sorted(o for o in wanted if split.start <= o < split.end)
            if not hits:
                continue
            seen: dict[tuple[int, int], Any] = {}
            for o in hits:
                for e in reader.entries_for(split.stream_id, o, o + 1):
                    seen[(e.start_offset, e.position)] = e
            entries = [seen[k] for k in sorted(seen)]
        else:
            entries = reader.entries_for(split.stream_id, split.start, split.end)
        yield from _rows(reader, split, entries, lo_ms, hi_ms, wanted, keys, not_null)
