"""Every reader also runs on a BlobStore object through ranged GETs only (no whole-object reads)."""

from __future__ import annotations

from pathlib import Path

from index_file import (
    BlobSource,
    IndexEntry,
    NativeIndexWriter,
    NativeUnsealedReader,
    RocketMQIndexReader,
    RocketMQIndexWriter,
    open_reader,
)
from storage_tier import open_store

from .helpers import as_rows, expected, expected_rocketmq

BEGIN = 1_700_000_000_000
ES = [IndexEntry("orders", i % 4, i, 10 + i, BEGIN + 250 * i, (f"k{i % 9}",)) for i in range(300)]


def test_native_unsealed_file_on_a_store(tmp_path: Path, store_url_factory) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "w.idx"
    w = NativeIndexWriter.create(p, BEGIN, slots=8, max_items=400)
    w.put_batch(ES)
    w.seal()
    w.close()
    store = open_store(store_url_factory("local"))
    store.put("w.idx", p.read_bytes())
    r = NativeUnsealedReader(BlobSource(store, "w.idx"), verify=False)
    before = store.meter.snapshot()
    got = r.query("orders", "k4", 10, BEGIN, BEGIN + 40_000)
    used = store.meter.snapshot() - before
    assert as_rows(got) == expected(ES, "orders", "k4", 10, BEGIN, BEGIN + 40_000)
    # a slot read, then one read per item of the chain: never the whole object
    assert used["GET"] == 1 + sum(1 for e in ES if _same_slot(r, e.keys[0], "k4"))
    assert used.bytes_out < 4 + 40 * len(ES)
    store.close()


def _same_slot(r: NativeUnsealedReader, a: str, b: str) -> bool:
    from index_file import fingerprint

    s = r.header.slot_count
    return fingerprint("orders", a) % s == fingerprint("orders", b) % s


def test_rocketmq_unsealed_file_on_a_store(tmp_path: Path, store_url_factory) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "r.idx"
    w = RocketMQIndexWriter.create(p, BEGIN, slots=11, max_items=400)
    w.put_batch(ES)
    w.close()
    store = open_store(store_url_factory("local"))
    store.put("r.idx", p.read_bytes())
    fmt, r = open_reader(BlobSource(store, "r.idx"), rocketmq_slots=11)
    assert isinstance(r, RocketMQIndexReader) and r.layout == "unsealed" and fmt.value == "rocketmq"
    for k in range(9):
        assert as_rows(r.query("orders", f"k{k}", 5)) == expected_rocketmq(ES, BEGIN, "orders", f"k{k}", 5, 0,
                                                                            2 ** 62)
    store.close()
