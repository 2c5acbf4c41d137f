"""A WRITING file after a power failure: its newest checkpoint (page 0) reached the disk but an item page
written after the last sync did not. Given how many items were synced, recovery goes back to what verifies
(the older checkpoint copy, else item by item from the start), cuts the rest and keeps the file; only a hole
in the synced part is an error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from index_file import FormatError, NativeIndexWriter
from index_file.native_unsealed import CHUNK_ITEMS, ITEM_SIZE, items_offset

BEGIN = 1_700_000_000_000
SLOTS = 16


def rec(i: int, topic: str = "t") -> tuple[str, int, int, int, int, list[str]]:
    return (topic, 0, i, 10, BEGIN + i, [f"k{i}"])


def lose_item(path: Path, index: int) -> None:
    """The item's 40 bytes as a page that never reached the disk leaves them: zeros."""
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, bytes(ITEM_SIZE), items_offset(SLOTS) + index * ITEM_SIZE)
    finally:
        os.close(fd)


def offsets(w: NativeIndexWriter, key: str, topic: str = "t") -> list[int]:
    return [h.offset for h in w.query(topic, key, 100)]


def write(path: Path, synced: int, after: list[list[int]], max_items: int = 1000) -> None:
    """`synced` items written and synced, then the batches of `after` written (each batch its own
    checkpoint) and the file closed without a sync."""
    w = NativeIndexWriter.create(path, BEGIN, slots=SLOTS, max_items=max_items)
    w.put_batch([rec(i) for i in range(synced)])
    w.sync()
    for batch in after:
        w.put_batch([rec(i) for i in batch])
    w.close()


def test_one_batch_after_the_sync_goes_back_to_the_older_checkpoint_copy(tmp_path: Path) -> None:
    p = tmp_path / "w.mqxu"
    write(p, 10, [list(range(10, 20))])
    lose_item(p, 15)
    w = NativeIndexWriter.open(p, synced_items=10)
    try:
        assert (w.item_count, w.rolled_back_items) == (15, 5)
        assert all(offsets(w, f"k{i}") == [i] for i in range(15))
        assert all(offsets(w, f"k{i}") == [] for i in range(15, 20))
        assert (w.min_time_ms, w.max_time_ms) == (BEGIN, BEGIN + 14)
        # the file keeps being written: what was cut is written again (re-dispatched)
        assert w.put_batch([rec(i) for i in range(15, 20)]) == 5
    finally:
        w.close()
    w = NativeIndexWriter.open(p, synced_items=15)
    try:
        assert w.item_count == 20 and w.rolled_back_items == 0
        assert all(offsets(w, f"k{i}") == [i] for i in range(20))
    finally:
        w.close()


def test_neither_checkpoint_copy_verifies_goes_back_to_the_synced_count(tmp_path: Path) -> None:
    p = tmp_path / "w.mqxu"
    write(p, 10, [[i] for i in range(10, 20)])  # one checkpoint per item: both copies count past the hole
    lose_item(p, 15)
    with pytest.raises(FormatError, match="items crc32c"):
        NativeIndexWriter.open(p, writable=False)  # without the synced count everything counted must verify
    w = NativeIndexWriter.open(p, synced_items=10)
    try:
        assert (w.item_count, w.rolled_back_items) == (15, 5)
        assert all(offsets(w, f"k{i}") == [i] for i in range(15))
        assert all(offsets(w, f"k{i}") == [] for i in range(15, 20))
    finally:
        w.close()


def test_a_hole_in_the_synced_items_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "w.mqxu"
    write(p, 10, [[i] for i in range(10, 20)])
    lose_item(p, 5)
    with pytest.raises(FormatError, match="items crc32c") as info:
        NativeIndexWriter.open(p, synced_items=10)
    assert str(p) in str(info.value)


def test_items_far_past_the_hole_never_come_back(tmp_path: Path) -> None:
    """More than a chunk written after the sync: every item left after the cut is cleared, so writing up to
    where the leftovers start and reopening finds exactly what was written."""
    p = tmp_path / "w.mqxu"
    n = CHUNK_ITEMS + 5000
    write(p, 10, [list(range(10, 10 + n))], max_items=3 * CHUNK_ITEMS)
    lose_item(p, 15)
    w = NativeIndexWriter.open(p, synced_items=10)
    try:
        assert w.item_count == 15 and w.torn_items == n - 6
        fresh = CHUNK_ITEMS + 100  # past where a cleared chunk after the cut ends
        assert w.put_batch([rec(i, "u") for i in range(fresh)]) == fresh
    finally:
        w.close()
    w = NativeIndexWriter.open(p)
    try:
        assert w.item_count == 15 + fresh and w.recovered_items == 0 and w.torn_items == 0
        assert offsets(w, f"k{10 + n - 1}") == [] and offsets(w, f"k{fresh - 1}", "u") == [fresh - 1]
    finally:
        w.close()
