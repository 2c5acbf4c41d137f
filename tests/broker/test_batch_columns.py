"""batch_columns.object_columns gives the entries record_entries.object_entries gives, as columns, and the
item rows made of them are the rows record_items makes of the entries."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from broker.objects.format import StreamRecord
from broker.objects.writer import write_object
from broker.partitions import batch_columns
from broker.partitions.batch_columns import object_columns
from broker.partitions.record_entries import ALL_KINDS, KIND_KEYS, KIND_RECORD_KEY, KIND_UNIQ_KEY, object_entries
from broker.partitions.records import ProducerRecord, build_batch
from jobs import index_items
from storage_tier import open_store

KEYS_VARIANTS: list[tuple[bytes | None, list[tuple[str, bytes | None]]]] = [
    (b"order-1", [("KEYS", b"cust-1 sku-2")]),
    (None, [("KEYS", b"a  b"), ("UNIQ_KEY", b"u-1")]),  # no key, an empty part
    (b"", [("UNIQ_KEY", b"")]),  # nothing to index
    (b"dup", [("KEYS", b"dup x dup"), ("UNIQ_KEY", b"x")]),  # a key repeated within the record
    (b"\xffbad\xfe", [("KEYS", b"caf\xc3\xa9 \xc3")]),  # invalid UTF-8 is indexed replaced
    (b"k", [("other", b"v"), ("KEYS", None), ("KEYS", b"second")]),  # two KEYS headers, one null
    (b"many", [("KEYS", b" ".join(b"m%d" % i for i in range(40)))]),  # more keys than the short dedup path
    (b"plain", []),
]


def _object(tmp_path: Path, compression: str) -> tuple[object, int]:
    store = open_store(f"file://{tmp_path}/store")
    stream_records = []
    base = 0
    for b in range(6):
        recs = []
        for i in range(50):
            key, headers = KEYS_VARIANTS[(b * 50 + i) % len(KEYS_VARIANTS)]
            recs.append(ProducerRecord(b"v" * (i % 7) if i % 5 else None, key=key, headers=headers,
                                       timestamp_ms=1_000 + (b * 50 + i) * 3))
        stream_records.append(StreamRecord(7, 0, base, len(recs), build_batch(recs, base, compression)))
        base += len(recs)
    info = write_object(store, "o/1", stream_records, block_size=4096)
    return store, info.size


def _items_of_entries(entries: list) -> np.ndarray:
    return index_items.record_items("topic", 3, [(e.offset, e.size, e.store_time_ms, e.keys) for e in entries])


@pytest.mark.parametrize("compression", ["none", "zstd"])
@pytest.mark.parametrize(("start", "end", "lo", "hi"), [(0, 300, 0, 1 << 62), (37, 261, 1_200, 1_700)])
@pytest.mark.parametrize("kinds", [ALL_KINDS, (KIND_RECORD_KEY,), (KIND_KEYS, KIND_UNIQ_KEY)])
def test_columns_are_the_entries(tmp_path: Path, compression: str, start: int, end: int, lo: int, hi: int,
                                 kinds: tuple[str, ...]) -> None:
    store, size = _object(tmp_path, compression)
    entries = list(object_entries(store, "o/1", size, 7, start, end, kinds, lo, hi))
    cols = object_columns(store, "o/1", size, 7, start, end, kinds, lo, hi)
    assert cols.records == end - start
    assert cols.offset.tolist() == [e.offset for e in entries]
    assert cols.time.tolist() == [e.store_time_ms for e in entries]
    assert cols.size.tolist() == [e.size for e in entries]
    # the columns keep a record's repeated key; the item rows drop it as record_keys does
    keys = iter(cols.keys)
    for e, n in zip(entries, cols.counts.tolist(), strict=True):
        got = [k.decode() for k in itertools.islice(keys, n)]
        assert list(dict.fromkeys(got)) == e.keys
    got_items = index_items.column_items("topic", 3, cols.offset, cols.time, cols.size, cols.counts, cols.keys)
    assert got_items.tobytes() == _items_of_entries(entries).tobytes()


def test_small_chunks_give_the_same_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, size = _object(tmp_path, "none")
    whole = object_columns(store, "o/1", size, 7, 10, 290)
    monkeypatch.setattr(batch_columns, "CHUNK_RECORDS", 60)
    chunked = object_columns(store, "o/1", size, 7, 10, 290)
    for f in ("offset", "time", "size", "counts"):
        assert getattr(chunked, f).tolist() == getattr(whole, f).tolist()
    assert chunked.keys == whole.keys and chunked.records == whole.records and chunked.bytes_read == whole.bytes_read


def test_the_reader_is_aiokafkas_c_extension() -> None:
    assert batch_columns.CRecordBatch.__module__.startswith("aiokafka.record._crecords")
