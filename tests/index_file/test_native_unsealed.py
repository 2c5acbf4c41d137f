"""The native WRITING file: exact keys, batches, full, concurrent readers, crash recovery, sealing."""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path

import numpy as np
import pytest

from index_file import AppendResult, FormatError, IndexEntry, IndexStateError, NativeIndexWriter, NativeUnsealedReader
from index_file.native_unsealed import CHUNK_ITEMS, HEADER_SIZE, ITEM_SIZE, items_offset

from .helpers import as_rows, expected

BEGIN = 1_700_000_000_000


def entries(n: int, keys: int = 50, topic: str = "orders") -> list[IndexEntry]:
    return [IndexEntry(topic, i % 4, i, 100 + i, BEGIN + i, (f"order-{i % keys}",)) for i in range(n)]


def test_exact_key_match_despite_java_hash_collision(tmp_path: Path) -> None:
    w = NativeIndexWriter.create(tmp_path / "w", BEGIN, slots=1, max_items=10)  # one slot: one shared chain
    w.put(IndexEntry("T", 0, 1, 10, BEGIN, ("Aa",)))
    w.put(IndexEntry("T", 0, 2, 10, BEGIN, ("BB",)))
    assert [(h.offset, h.key, h.exact) for h in w.query("T", "Aa")] == [(1, "Aa", True)]
    assert [h.offset for h in w.query("T", "BB")] == [2]
    assert w.query("U", "Aa") == []  # the topic is part of the fingerprint
    w.close()


def test_batches_queries_and_order(tmp_path: Path) -> None:
    es = entries(3000)
    w = NativeIndexWriter.create(tmp_path / "w", BEGIN, slots=101, max_items=5000)
    assert w.put_batch(es[:1000]) == 1000
    assert w.put_batch(iter(es[1000:])) == 2000
    assert w.item_count == 3000
    for k in (0, 7, 49):
        for mx, lo, hi in ((64, 0, 2 ** 62), (5, 0, 2 ** 62), (1000, BEGIN + 500, BEGIN + 1500), (0, 0, 2 ** 62)):
            got = w.query("orders", f"order-{k}", mx, lo, hi)
            assert as_rows(got) == expected(es, "orders", f"order-{k}", mx, lo, hi)
    assert w.min_time_ms == BEGIN and w.max_time_ms == BEGIN + 2999
    w.close()


def test_multi_key_entries_and_repeated_keys(tmp_path: Path) -> None:
    w = NativeIndexWriter.create(tmp_path / "w", BEGIN, slots=16, max_items=100)
    assert w.put_batch([IndexEntry("T", 1, 5, 9, BEGIN, ("k", "uniq", "k")), ("T", 1, 6, 9, BEGIN + 1, "k")]) == 2
    assert w.item_count == 3  # "k" stored once for the first entry
    assert [h.offset for h in w.query("T", "k")] == [6, 5]
    assert [h.offset for h in w.query("T", "uniq")] == [5]
    w.close()


def test_full_reports_accepted_prefix_and_whole_entries(tmp_path: Path) -> None:
    w = NativeIndexWriter.create(tmp_path / "w", BEGIN, slots=8, max_items=10)
    batch = [IndexEntry("T", 0, i, 1, BEGIN + i, (f"a{i}", f"b{i}", f"c{i}")) for i in range(5)]
    assert w.put_batch(batch) == 3  # 9 items; the 4th entry needs 3 more of the 1 left
    assert w.full and w.item_count == 9
    assert w.query("T", "a3") == []
    assert w.put(IndexEntry("T", 0, 99, 1, BEGIN, ("x",))) is AppendResult.FULL  # full stays full
    w.seal()
    with pytest.raises(IndexStateError):
        w.put_batch(batch)
    w.close()


def test_bad_field_values_store_nothing(tmp_path: Path) -> None:
    w = NativeIndexWriter.create(tmp_path / "w", BEGIN, slots=8, max_items=10)
    with pytest.raises(ValueError):
        w.put_batch([IndexEntry("T", 0, 1, 1, BEGIN, ("a",)), IndexEntry("T", 1 << 40, 2, 1, BEGIN, ("b",))])
    assert w.item_count == 0 and w.query("T", "a") == []
    w.close()


def test_close_reopen_and_seal(tmp_path: Path) -> None:
    es = entries(500)
    p = tmp_path / "w"
    w = NativeIndexWriter.create(p, BEGIN, slots=64, max_items=1000)
    w.put_batch(es)
    w.close()
    w = NativeIndexWriter.open(p)
    assert (w.item_count, w.recovered_items, w.torn_items) == (500, 0, 0)
    w.put_batch(entries(10, topic="other"))
    w.seal()
    assert os.path.getsize(p) == items_offset(64) + 510 * ITEM_SIZE  # unused space cut off
    assert as_rows(w.query("orders", "order-3", 100)) == expected(es, "orders", "order-3", 100, 0, 2 ** 62)
    w.close()
    w = NativeIndexWriter.open(p)
    assert w.sealed and w.item_count == 510
    w.close()
    with NativeUnsealedReader(p) as r:
        assert r.sealed and as_rows(r.query("orders", "order-3", 7)) == expected(es, "orders", "order-3", 7, 0,
                                                                                   2 ** 62)


def _ckpt_seq(raw: bytes, i: int) -> int:
    return struct.unpack_from("<Q", raw, HEADER_SIZE + 64 * i)[0]


def test_recovery_counts_items_from_content_not_the_stale_checkpoint(tmp_path: Path) -> None:
    p = tmp_path / "w"
    es = entries(300)
    w = NativeIndexWriter.create(p, BEGIN, slots=32, max_items=1000)
    w.put_batch(es[:100])
    stale = p.read_bytes()[HEADER_SIZE:HEADER_SIZE + 128]  # both checkpoint copies after 100 items
    w.put_batch(es[100:])
    w.close()
    with open(p, "r+b") as f:  # as if the process died before the last checkpoints reached the file
        f.seek(HEADER_SIZE)
        f.write(stale)
    w = NativeIndexWriter.open(p)
    assert w.item_count == 300 and w.recovered_items == 200
    assert as_rows(w.query("orders", "order-5", 100)) == expected(es, "orders", "order-5", 100, 0, 2 ** 62)
    w.close()


def test_torn_tail_is_cut_and_cleared(tmp_path: Path) -> None:
    p = tmp_path / "w"
    es = entries(300)
    w = NativeIndexWriter.create(p, BEGIN, slots=32, max_items=1000)
    w.put_batch(es[:100])
    stale = p.read_bytes()[HEADER_SIZE:HEADER_SIZE + 128]
    w.put_batch(es[100:])
    w.close()
    with open(p, "r+b") as f:
        f.seek(HEADER_SIZE)
        f.write(stale)
        f.seek(items_offset(32) + 250 * ITEM_SIZE + 3)  # item 250 half written
        f.write(b"\xff\xff")
    w = NativeIndexWriter.open(p)
    assert (w.item_count, w.recovered_items, w.torn_items) == (250, 150, 50)
    assert as_rows(w.query("orders", "order-5", 100)) == expected(es[:250], "orders", "order-5", 100, 0, 2 ** 62)
    # the cleared tail cannot come back: new writes, then reopen, give exactly the new count
    assert w.put_batch(entries(10, topic="new")) == 10
    w.close()
    w = NativeIndexWriter.open(p)
    assert w.item_count == 260 and w.torn_items == 0
    w.close()


def test_flipped_committed_item_is_detected(tmp_path: Path) -> None:
    p = tmp_path / "w"
    w = NativeIndexWriter.create(p, BEGIN, slots=32, max_items=1000)
    w.put_batch(entries(100))
    w.close()
    with open(p, "r+b") as f:
        f.seek(items_offset(32) + 40 * ITEM_SIZE + 17)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0x10]))
    with pytest.raises(FormatError, match="items crc32c") as info:
        NativeIndexWriter.open(p)
    assert str(p) in str(info.value)


def test_corrupt_header_and_foreign_file(tmp_path: Path) -> None:
    p = tmp_path / "w"
    NativeIndexWriter.create(p, BEGIN, slots=4, max_items=10).close()
    raw = bytearray(p.read_bytes())
    raw[9] ^= 1
    p.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match="header crc32c"):
        NativeIndexWriter.open(p)
    q = tmp_path / "foreign"
    q.write_bytes(b"\x89PNG" + bytes(500))
    with pytest.raises(FormatError, match="magic"):
        NativeIndexWriter.open(q)
    short = tmp_path / "short"
    short.write_bytes(b"MQXU")
    with pytest.raises(FormatError, match="truncated"):
        NativeIndexWriter.open(short)


def test_readers_concurrent_with_one_writer(tmp_path: Path) -> None:
    """Readers running while batches land see, for every key, exactly the entries of whole batches:
    never a partial batch, never fewer than what was committed before the query started."""
    w = NativeIndexWriter.create(tmp_path / "w", BEGIN, slots=512, max_items=200_000)
    batch_size, batches = 997, 60
    committed = [0]  # number of whole batches put, published by the writer thread
    errors: list[BaseException] = []
    done = threading.Event()

    def writer() -> None:
        try:
            for b in range(batches):
                es = [IndexEntry("T", 0, b * batch_size + i, 1, BEGIN + b, (f"k{i % 10}",)) for i in range(batch_size)]
                assert w.put_batch(es) == batch_size
                committed[0] = b + 1
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            done.set()

    def reader() -> None:
        try:
            while not done.is_set():
                before = committed[0]
                hits = w.query("T", "k3", 10 ** 6)
                per_batch = sum(1 for i in range(batch_size) if i % 10 == 3)
                assert len(hits) % per_batch == 0  # whole batches only
                assert len(hits) >= before * per_batch
                assert hits == sorted(hits, key=lambda h: (h.store_time_ms, h.offset), reverse=True)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(w.query("T", "k3", 10 ** 6)) == batches * sum(1 for i in range(batch_size) if i % 10 == 3)
    w.close()


def test_batches_larger_than_a_checkpoint_chunk(tmp_path: Path) -> None:
    n = CHUNK_ITEMS + 1000
    w = NativeIndexWriter.create(tmp_path / "w", BEGIN, slots=4096, max_items=n + 10)
    es = [IndexEntry("T", 0, i, 1, BEGIN, (f"key-{i}", f"alt-{i % 3}")) for i in range(n // 2)]
    assert w.put_batch(es) == len(es)
    items = w.items()
    assert len(items) == 2 * len(es)
    assert np.all(items["next"] <= np.arange(len(items)))  # every chain points at older items
    w.close()
    w = NativeIndexWriter.open(tmp_path / "w")
    assert w.item_count == 2 * len(es) and w.recovered_items == 0
    assert [h.offset for h in w.query("T", f"key-{n // 4}")] == [n // 4]
    w.close()
