"""Index columns of stored records, decoded a column at a time: the Spark build's extract.

`object_columns` reads the same records as `record_entries.object_entries` (one object's part of one stream,
ranged GETs through `ObjectReader`) and returns the same entries, as columns instead of one Python object
per record: numpy arrays of offset, size and store time per indexed record, the number of keys of each, and
one flat list of every key's UTF-8 bytes in record order. `object_entries` stays the per-record form the
broker's read paths and tools use; tests/broker/test_batch_columns.py checks both give the same entries.

The records are walked by aiokafka's Cython `DefaultRecordBatch` (CRC check, decompression, varint layout
in C). Importing this module fails when that reader is the pure-Python fallback (aiokafka built without its
extension, or AIOKAFKA_NO_EXTENSIONS set): a silent fallback would make the batch build several times slower.
What is left in Python is one pass per field over lists (comprehensions and `map` over C callables), not a
function call and a list per record: a record's keys are its key, the parts of header KEYS split on spaces
and header UNIQ_KEY, as `record_entries.record_keys` lists them (empty keys dropped; a key repeated within
one record is kept here and dropped by the fingerprint de-duplication of the item rows).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import operator
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from aiokafka.record.default_records import DefaultRecordBatch as CRecordBatch

from broker.objects.reader import ObjectReader, RangeSource
from broker.partitions.key_text import key_text
from broker.partitions.record_entries import ALL_KINDS, KIND_KEYS, KIND_RECORD_KEY, KIND_UNIQ_KEY
from broker.partitions.records import HEADER_KEYS, HEADER_UNIQ_KEY, batch_records, batch_slices

if not CRecordBatch.__module__.startswith("aiokafka.record._crecords"):
    raise ImportError(f"aiokafka's record reader is {CRecordBatch.__module__}, not its C extension "
                      f"(aiokafka.record._crecords): install an aiokafka wheel with the extension and unset "
                      f"AIOKAFKA_NO_EXTENSIONS")

_offset = operator.attrgetter("offset")
_timestamp = operator.attrgetter("timestamp")
_key = operator.attrgetter("key")
_value = operator.attrgetter("value")
_headers = operator.attrgetter("headers")
_first = operator.itemgetter(0)
_second = operator.itemgetter(1)
_chain = itertools.chain.from_iterable


@dataclass
class KeyColumns:
    """Indexed records of one object part (in [start, end), stored in [lo, hi), with at least one key)."""

    offset: np.ndarray  # int64, one per indexed record, in offset order
    time: np.ndarray  # int64 store time (ms)
    size: np.ndarray  # int64: key + value + every header name and value, as the produce path counts it
    counts: np.ndarray  # int64 keys per record (>= 1)
    keys: list[bytes]  # sum(counts) keys, each record's in order, key_text's UTF-8 (binary keys as such)
    records: int  # records decoded in [start, end), before the time filter
    bytes_read: int  # payload bytes of the stream records read


def _lens(items: list[bytes | None]) -> np.ndarray:
    return np.fromiter(map(operator.length_hint, items), dtype=np.int64, count=len(items))  # None: 0


def _utf8(key: bytes) -> bytes:
    """The key as record_keys sees it (key_text: a key that is not UTF-8 as its binary form), encoded."""
    return key_text(key).encode()


def _batch_records(payload: bytes) -> list:
    """aiokafka's records of every batch in one stream record's payload, CRC-checked (RecordFormatError on
    damage)."""
    out: list = []
    for pos, h, raw in batch_slices(payload):
        if not h.is_control:  # a transaction marker (control batch): never indexed, as the broker indexes live
            out += batch_records(raw, h, pos)
    return out


def records_columns(recs: list, start: int, end: int, kinds: tuple[str, ...] = ALL_KINDS, lo: int = 0,
                    hi: int = 1 << 62, append_ms: np.ndarray | None = None) -> KeyColumns:
    """KeyColumns of aiokafka records (bytes_read left 0). `append_ms`: per record, the append time stored with
    its stream record, or -1 where none is (the record's timestamp is its store time then)."""
    offsets = np.fromiter(map(_offset, recs), dtype=np.int64, count=len(recs))
    in_range = (offsets >= start) & (offsets < end)
    n_range = int(in_range.sum())
    times = np.fromiter(map(_timestamp, recs), dtype=np.int64, count=len(recs))
    if append_ms is not None:
        times = np.where(append_ms >= 0, append_ms, times)
    keep = in_range & (times >= lo) & (times < hi)
    if not keep.all():
        recs = list(itertools.compress(recs, keep.tolist()))
        offsets, times = offsets[keep], times[keep]
    n = len(recs)
    keys = list(map(_key, recs))
    headers = list(map(_headers, recs))
    h_counts = np.fromiter(map(len, headers), dtype=np.int64, count=n)
    flat = list(_chain(headers))
    h_rec = np.repeat(np.arange(n, dtype=np.int64), h_counts)
    names = list(map(_first, flat))
    values = list(map(_second, flat))
    name_lens = np.fromiter(map(len, names), dtype=np.int64, count=len(names))
    sizes = _lens(keys) + _lens(list(map(_value, recs)))
    sizes += np.bincount(h_rec, weights=name_lens + _lens(values), minlength=n).astype(np.int64)

    # key rows: (record, rank, bytes); rank keeps a record's keys in record_keys' order after a stable sort
    parts_rec: list[np.ndarray] = []
    parts_rank: list[np.ndarray] = []
    parts_keys: list[bytes] = []
    if KIND_RECORD_KEY in kinds:
        parts_rec.append(np.arange(n, dtype=np.int64))
        parts_rank.append(np.zeros(n, dtype=np.int64))
        parts_keys += [b or b"" for b in keys]
    if flat and (KIND_KEYS in kinds or KIND_UNIQ_KEY in kinds):
        name_arr = np.array(names, dtype=object)
        if KIND_KEYS in kinds:
            sel = np.flatnonzero(name_arr == HEADER_KEYS)
            split = [(values[i] or b"").split(b" ") for i in sel.tolist()]
            parts_rec.append(np.repeat(h_rec[sel], np.fromiter(map(len, split), dtype=np.int64, count=len(split))))
            parts_keys += _chain(split)
            parts_rank.append(np.ones(len(parts_rec[-1]), dtype=np.int64))
        if KIND_UNIQ_KEY in kinds:
            sel = np.flatnonzero(name_arr == HEADER_UNIQ_KEY)
            parts_rec.append(h_rec[sel])
            parts_rank.append(np.full(len(sel), 2, dtype=np.int64))
            parts_keys += [values[i] or b"" for i in sel.tolist()]
    if parts_rec:
        k_rec = np.concatenate(parts_rec)
        k_rank = np.concatenate(parts_rank)
    else:
        k_rec = k_rank = np.zeros(0, dtype=np.int64)
    nonempty = np.fromiter(map(len, parts_keys), dtype=np.int64, count=len(parts_keys)) > 0
    order = np.argsort(k_rec * 3 + k_rank, kind="stable")
    order = order[nonempty[order]]
    k_rec = k_rec[order]
    flat_keys = list(map(parts_keys.__getitem__, order.tolist()))
    if not b"".join(flat_keys).isascii():
        flat_keys = [k if k.isascii() else _utf8(k) for k in flat_keys]
    counts = np.bincount(k_rec, minlength=n).astype(np.int64)
    has = counts > 0
    return KeyColumns(offsets[has], times[has], sizes[has], counts[has], flat_keys, n_range, 0)


def concat_columns(parts: list[KeyColumns]) -> KeyColumns:
    if len(parts) == 1:
        return parts[0]
    return KeyColumns(np.concatenate([p.offset for p in parts]), np.concatenate([p.time for p in parts]),
                      np.concatenate([p.size for p in parts]), np.concatenate([p.counts for p in parts]),
                      list(_chain(p.keys for p in parts)), sum(p.records for p in parts),
                      sum(p.bytes_read for p in parts))


#: records decoded before their columns are made: large enough that the per-column numpy calls cost
#: nothing per record, small enough that the decoded records of one step stay a few tens of MB
CHUNK_RECORDS = 65_536


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Decoding allocates a few objects per record and frees them by reference counting (no cycles); the
    cyclic collector would walk the growing list of decoded records again and again meanwhile (measured:
    most of the decode time), so it is paused while one object part is decoded."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def object_columns(store: RangeSource, key: str, size: int | None, stream_id: int, start: int, end: int,
                   kinds: tuple[str, ...] = ALL_KINDS, lo: int = 0, hi: int = 1 << 62) -> KeyColumns:
    """The entries `record_entries.object_entries` yields for the same arguments, as columns."""
    reader = ObjectReader(store, key, size=size)
    parts: list[KeyColumns] = []
    recs: list = []
    stamps: list[np.ndarray] = []  # per record, its stream record's stored append time (-1: none)
    nbytes = 0
    with _collector_paused():
        for sr in reader.read(stream_id, start, end):
            nbytes += len(sr.payload)
            got = _batch_records(sr.payload)
            recs += got
            stamps.append(np.full(len(got), -1 if sr.append_ms is None else sr.append_ms, dtype=np.int64))
            if len(recs) >= CHUNK_RECORDS:
                parts.append(records_columns(recs, start, end, kinds, lo, hi, np.concatenate(stamps)))
                recs, stamps = [], []
        if recs or not parts:
            parts.append(records_columns(recs, start, end, kinds, lo, hi,
                                         np.concatenate(stamps) if stamps else None))
    cols = concat_columns(parts)
    cols.bytes_read = nbytes
    return cols
