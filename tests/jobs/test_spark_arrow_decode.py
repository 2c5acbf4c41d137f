"""The Spark source's columnar decode (jobs/spark_source/arrow_decode.py, C columns straight into Arrow
buffers) gives exactly the rows of the per-record decode (aiokafka's reader) on the same stored objects:
random batches of every codec, null keys, values and header values, LogAppendTime and control batches,
offset and time ranges, a lookup's offsets, key and not-null filters; damage is an error in both."""

from __future__ import annotations

import datetime as dt
import struct
import tempfile
from typing import Any

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.objects.format import StreamRecord
from broker.objects.writer import write_object
from broker.partitions.batch_check import CRC_START
from broker.partitions.records import ProducerRecord, RecordFormatError, build_batch
from jobs.spark_source import arrow_decode
from jobs.spark_source.plan import Split
from jobs.spark_source.read import arrow_batches, records
from storage_tier import open_store

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
STREAM = 5
T0 = 1_700_000_000_000


def test_the_columnar_decoder_is_built() -> None:
    """`pip install -e .` compiles it (setup.py); without it the source falls back to the per-record decode and
    the comparisons below would compare that decode with itself."""
    assert arrow_decode.AVAILABLE, "jobs/spark_source/_arrow_columns is not built: run make .venv/.installed"

blobs = st.one_of(st.none(), st.binary(max_size=40))
names = st.sampled_from(["KEYS", "UNIQ_KEY", "trace", "", "café", "x" * 30])
record = st.tuples(blobs, blobs, st.lists(st.tuples(names, blobs), max_size=4), st.integers(0, 5_000))
batch = st.tuples(st.lists(record, min_size=1, max_size=30), st.sampled_from(CODECS),
                  st.sampled_from(["create", "create", "append", "control"]))


def _attributes(raw: bytes, bits: int, max_ts: int | None = None) -> bytes:
    """The batch with attribute bits set (LogAppendTime 0x08, control 0x20), its max timestamp replaced, the
    CRC recomputed."""
    b = bytearray(raw)
    attrs = struct.unpack_from(">h", b, 21)[0] | bits
    struct.pack_into(">h", b, 21, attrs)
    if max_ts is not None:
        struct.pack_into(">q", b, 35, max_ts)
    struct.pack_into(">I", b, 17, crc32c.crc32c(bytes(b[CRC_START:])))
    return bytes(b)


def _object(root: str, batches: list[Any], per_record: int) -> tuple[Any, list[StreamRecord], int]:
    store = open_store(f"file://{root}")
    srs: list[StreamRecord] = []
    base = 0
    for i, (recs, codec, kind) in enumerate(batches):
        prs = [ProducerRecord(v, key=k, headers=h, timestamp_ms=T0 + ts) for k, v, h, ts in recs]
        raw = build_batch(prs, base, codec)
        if kind == "append":
            raw = _attributes(raw, 0x08, T0 + 10_000 + i)
        elif kind == "control":
            raw = _attributes(raw, 0x20)
        if per_record and srs and i % per_record:  # two batches in one stream record
            prev = srs.pop()
            srs.append(StreamRecord(STREAM, 0, prev.base_offset, prev.count + len(recs), prev.payload + raw))
        else:
            srs.append(StreamRecord(STREAM, 0, base, len(recs), raw))
        base += len(recs)
    info = write_object(store, "o/1", srs, block_size=512)
    return store, srs, info.size


def _split(size: int, start: int, end: int) -> Split:
    return Split("t", 2, STREAM, 1, "SO", "o/1", size, start, end, size)


def _rows(rbs: list[Any]) -> list[tuple[Any, ...]]:
    out = []
    for rb in rbs:
        for r in rb.to_pylist():
            ts = r["timestamp"]
            ms = (ts - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(milliseconds=1)
            out.append((r["key"], r["value"], r["topic"], r["partition"], r["offset"], ms, r["timestampType"],
                        [(h["key"], h["value"]) for h in r["headers"]]))
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(batch, min_size=1, max_size=6), data=st.data())
def test_columnar_rows_are_the_per_record_rows(batches: list[Any], data: st.DataObject) -> None:
    total = sum(len(b[0]) for b in batches)
    start = data.draw(st.integers(0, total))
    end = data.draw(st.integers(start, total + 2))
    lo_ms = data.draw(st.one_of(st.none(), st.integers(T0, T0 + 5_000)))
    hi_ms = data.draw(st.one_of(st.none(), st.integers(T0, T0 + 12_000)))
    offsets = data.draw(st.one_of(st.none(), st.sets(st.integers(0, total), max_size=8)))
    keys = data.draw(st.one_of(st.none(), st.sets(st.binary(max_size=2), max_size=3)))
    not_null = frozenset(data.draw(st.sets(st.sampled_from(["key", "value"]))))
    rows = data.draw(st.sampled_from([1, 7, 8192]))
    with tempfile.TemporaryDirectory() as root:
        store, _, size = _object(root, batches, data.draw(st.sampled_from([0, 2])))
        splits = [_split(size, start, end)]
        wanted = None if offsets is None else {("t", 2): offsets}
        expected = list(records(store, splits, lo_ms, hi_ms, wanted, keys, not_null))
        got = list(arrow_batches(store, splits, lo_ms, hi_ms, wanted, keys, not_null, rows=rows, columnar=True))
        fallback = list(arrow_batches(store, splits, lo_ms, hi_ms, wanted, keys, not_null, columnar=False))
    assert all(rb.schema == got[0].schema for rb in got + fallback)
    assert _rows(got) == expected
    assert _rows(fallback) == expected


def test_two_splits_of_one_object_and_large_values() -> None:
    recs = [(b"k%d" % i, b"v" * (i * 997 % 5000), [("h", b"x" * i)], i) for i in range(200)]
    with tempfile.TemporaryDirectory() as root:
        store, _, size = _object(root, [(recs[:120], "zstd", "create"), (recs[120:], "none", "create")], 0)
        splits = [_split(size, 3, 90), _split(size, 90, 199)]
        expected = list(records(store, splits))
        got = list(arrow_batches(store, splits, rows=50, columnar=True))
    assert len(got) > 1
    assert _rows(got) == expected and len(expected) == 196


def damaged_object(root: str, damage: str) -> tuple[Any, int]:
    """(store, object size) of object o/1 under root: one batch of 20 records whose last value is flipped, so its
    CRC fails ("crc"), or also with a record length running past the batch and the CRC made to match ("record")."""
    recs = [(b"k", b"value-%d" % i, [], i) for i in range(20)]
    store, srs, _ = _object(root, [(recs, "none", "create")], 0)
    raw = bytearray(srs[0].payload)
    raw[-3] ^= 0x5A  # inside the last record's value
    if damage == "record":
        raw[61] = 0x7E
        struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[CRC_START:])))
    info = write_object(store, "o/1", [StreamRecord(STREAM, 0, 0, 20, bytes(raw))], block_size=512)
    return store, info.size


@pytest.mark.parametrize("damage", ["crc", "record"])
def test_damage_is_an_error_in_both_decodes(damage: str) -> None:
    with tempfile.TemporaryDirectory() as root:
        store, size = damaged_object(root, damage)
        splits = [_split(size, 0, 20)]
        with pytest.raises(RecordFormatError):
            list(records(store, splits))
        with pytest.raises(RecordFormatError, match="o/1"):
            list(arrow_batches(store, splits, columnar=True))
