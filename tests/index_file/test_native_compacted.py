"""Compaction into the native compacted layout and its local and remote readers."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from index_file import (
    BytesSource,
    CompactedIndexReader,
    FormatError,
    IndexEntry,
    IndexStateError,
    NativeIndexWriter,
    RemoteCompactedIndexReader,
    compact,
    fingerprint,
)
from index_file.native_compacted import FOOTER_SIZE, HEADER_SIZE, ITEM_SIZE
from storage_tier import open_store

from .helpers import as_rows, expected

BEGIN = 1_700_000_000_000


def build(tmp_path: Path, es: list[IndexEntry], items_per_block: int = 64, slots: int = 97) -> tuple[Path, Path]:
    src, dst = tmp_path / "src.idx", tmp_path / "dst.cidx"
    w = NativeIndexWriter.create(src, BEGIN, slots=slots, max_items=max(1, sum(len(e.keys) for e in es)))
    assert w.put_batch(es) == len(es)
    w.seal()
    w.close()
    compact(src, dst, items_per_block=items_per_block)
    return src, dst


def sample(n: int = 5000) -> list[IndexEntry]:
    rng = np.random.default_rng(7)
    times = rng.integers(BEGIN, BEGIN + 10_000, n)
    return [IndexEntry(f"t{i % 3}", i % 5, i, 50 + i % 100, int(times[i]), (f"k{i % 40}", f"u{i}")) for i in range(n)]


def test_compacted_answers_like_the_model(tmp_path: Path) -> None:
    es = sample()
    _src, dst = build(tmp_path, es)
    with CompactedIndexReader(dst) as r:
        assert r.item_count == 2 * len(es)
        assert r.min_time_ms == min(e.store_time_ms for e in es)
        for topic in ("t0", "t1", "t2"):
            for key in ("k0", "k13", "k39", "u9", "u10", "missing"):
                for mx, lo, hi in ((64, 0, 2 ** 62), (3, 0, 2 ** 62), (1000, BEGIN + 2000, BEGIN + 4000)):
                    assert as_rows(r.query(topic, key, mx, lo, hi)) == expected(es, topic, key, mx, lo, hi)


def test_layout_sorted_blocks_and_fence(tmp_path: Path) -> None:
    es = sample(1000)
    _src, dst = build(tmp_path, es, items_per_block=64)
    raw = dst.read_bytes()
    n, B = 2000, (2000 + 63) // 64
    assert raw[:4] == b"MQXC" and raw[-12:-8] == b"MQXE"
    assert len(raw) == HEADER_SIZE + n * ITEM_SIZE + 12 * B + FOOTER_SIZE
    fps = []
    for b in range(B):
        cnt = min(64, n - 64 * b)
        start = HEADER_SIZE + b * 64 * ITEM_SIZE
        fps += list(struct.unpack_from(f"<{cnt}Q", raw, start))
    assert fps == sorted(fps)
    fence = struct.unpack_from(f"<{B}Q", raw, HEADER_SIZE + n * ITEM_SIZE)
    assert list(fence) == fps[::64]
    want = sorted(fingerprint(e.topic, k) for e in es for k in e.keys)
    assert fps == want


def test_a_key_spanning_many_blocks(tmp_path: Path) -> None:
    es = [IndexEntry("T", i % 2, i, 1, BEGIN + i // 3, ("hot",)) for i in range(700)]
    es += [IndexEntry("T", 0, 10_000 + i, 1, BEGIN, (f"cold{i}",)) for i in range(300)]
    _src, dst = build(tmp_path, es, items_per_block=16)
    with CompactedIndexReader(dst) as r:
        first, last = r.blocks_for(fingerprint("T", "hot"))
        assert last - first > 40
        assert as_rows(r.query("T", "hot", 10_000)) == expected(es, "T", "hot", 10_000, 0, 2 ** 62)
        assert as_rows(r.query("T", "hot", 17)) == expected(es, "T", "hot", 17, 0, 2 ** 62)


def test_duplicate_records_are_dropped(tmp_path: Path) -> None:
    es = sample(200)
    _src, dst = build(tmp_path, es + es[:50])  # re-dispatched after a crash
    with CompactedIndexReader(dst) as r:
        assert r.item_count == 400
        assert as_rows(r.query("t0", "k0", 100)) == expected(es, "t0", "k0", 100, 0, 2 ** 62)


def test_empty_file_compacts(tmp_path: Path) -> None:
    src, dst = tmp_path / "s", tmp_path / "d"
    w = NativeIndexWriter.create(src, BEGIN, slots=4, max_items=4)
    w.seal()
    w.close()
    assert compact(src, dst).items == 0
    with CompactedIndexReader(dst) as r:
        assert r.item_count == 0 and r.query("T", "k") == [] and r.min_time_ms is None


def test_compacting_a_writing_file_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "s"
    w = NativeIndexWriter.create(src, BEGIN, slots=4, max_items=4)
    with pytest.raises(IndexStateError):
        compact(src, tmp_path / "d")
    w.close()


def test_remote_reader_one_ranged_get_per_query(tmp_path: Path, store_url_factory) -> None:  # type: ignore[no-untyped-def]
    es = sample(20_000)
    _src, dst = build(tmp_path, es, items_per_block=2048, slots=4096)
    store = open_store(store_url_factory("s3"))
    store.put("idx/native.cidx", dst.read_bytes())
    loaded = store.meter.snapshot()
    remote = RemoteCompactedIndexReader(store, "idx/native.cidx")
    assert (store.meter.snapshot() - loaded).total == 2  # header, summary + footer: once per file
    local = CompactedIndexReader(dst)
    for i in range(0, 20_000, 997):
        before = store.meter.snapshot()
        hits = remote.query(f"t{i % 3}", f"u{i}", 64)
        assert (store.meter.snapshot() - before)["GET"] == 1
        assert (store.meter.snapshot() - before).total == 1
        assert as_rows(hits) == expected(es, f"t{i % 3}", f"u{i}", 64, 0, 2 ** 62) and len(hits) == 1
        assert hits == local.query(f"t{i % 3}", f"u{i}", 64)
    local.close()
    store.close()


def test_remote_reader_detects_a_corrupt_block(tmp_path: Path, store_url_factory) -> None:  # type: ignore[no-untyped-def]
    es = sample(3000)
    _src, dst = build(tmp_path, es, items_per_block=256)
    raw = bytearray(dst.read_bytes())
    with CompactedIndexReader(dst) as r:
        b = r.blocks_for(fingerprint("t0", "u3"))[0]
        start, end = r.header.block_range(b)
    raw[(start + end) // 2] ^= 0x04
    store = open_store(store_url_factory("local"))
    store.put("bad", bytes(raw))
    remote = RemoteCompactedIndexReader(store, "bad")  # the summary is intact: opening works
    with pytest.raises(FormatError, match="block crc32c") as info:
        remote.query("t0", "u3")
    assert "bad" in str(info.value)
    with pytest.raises(FormatError, match="block crc32c"):
        CompactedIndexReader(BytesSource(bytes(raw), "bad"), verify_blocks=True)


def test_truncated_remote_object(tmp_path: Path, store_url_factory) -> None:  # type: ignore[no-untyped-def]
    _src, dst = build(tmp_path, sample(500))
    store = open_store(store_url_factory("local"))
    store.put("cut", dst.read_bytes()[:-10])
    with pytest.raises(FormatError, match="truncated"):
        RemoteCompactedIndexReader(store, "cut")
