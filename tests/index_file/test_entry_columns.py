"""Entries as columns: the fast write path stores exactly what the per-key definition says, whatever the
shape of the keys, and a file written from ready item rows (put_items) is byte for byte the file put_batch
writes from the same entries."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from index_file import IndexEntry, NativeIndexWriter
from index_file.entry_columns import SUB_ENTRIES, entry_columns
from index_file.hashing import fingerprint
from index_file.native_unsealed import ITEM_DTYPE

BEGIN = 1_700_000_000_000
texts = st.text(min_size=1, max_size=12)
key_shapes = st.one_of(texts, st.lists(texts, min_size=1, max_size=3), st.tuples(texts))
entry = st.tuples(st.sampled_from(["orders", "pay-é", "t"]), st.integers(0, 2**31 - 1), st.integers(0, 2**62),
                  st.integers(0, 2**31 - 1), st.integers(0, 2**62), key_shapes)


def expected_fps(entries: list[tuple]) -> list[int]:
    out: list[int] = []
    for topic, _q, _o, _s, _t, keys in entries:
        seen: list[int] = []
        for k in [keys] if isinstance(keys, str) else keys:
            f = fingerprint(topic, k)
            if f not in seen:
                seen.append(f)
        out += seen
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(entry, max_size=40), st.integers(1, 2))
def test_columns_and_fingerprints_match_the_definition(entries: list[tuple], repeat: int) -> None:
    entries = entries * repeat
    cols = entry_columns(entries, with_fingerprints=True)
    assert cols.fps is not None and cols.fps.tolist() == expected_fps(entries)
    for col, i in ((cols.queue, 1), (cols.offset, 2), (cols.size, 3), (cols.time, 4)):
        assert col.tolist() == [e[i] for e in entries]
    assert cols.topics == [e[0] for e in entries] and cols.keys == [e[5] for e in entries]


def test_parts_boundaries_and_bad_entries() -> None:
    n = 2 * SUB_ENTRIES + 3  # several parts, the last one short
    entries = [("t", i % 7, i, 10, BEGIN + i, [f"k{i}"]) for i in range(n)]
    cols = entry_columns(entries, with_fingerprints=True)
    assert cols.fps is not None and cols.fps.tolist() == [fingerprint("t", f"k{i}") for i in range(n)]
    assert cols.slice(5, 9).offset.tolist() == [5, 6, 7, 8]
    with pytest.raises(ValueError, match="6 fields"):
        entry_columns([*entries[:SUB_ENTRIES + 1], ("t", 0, 1)])
    with pytest.raises(TypeError, match="not an int"):
        entry_columns([("t", 0, 1.5, 1, BEGIN, "k")], strict=True)
    with pytest.raises(TypeError, match="not an int"):
        entry_columns([("t", True, 1, 1, BEGIN, "k")], strict=True)
    with pytest.raises(OverflowError):
        entry_columns([("t", 0, 1 << 70, 1, BEGIN, "k")])


def test_put_items_writes_the_file_put_batch_writes(tmp_path: Path) -> None:
    entries = [IndexEntry("orders", i % 5, i, 100 + i, BEGIN + 37 * i, (f"o{i % 50}", f"c{i}")) for i in range(3000)]
    a = NativeIndexWriter.create(tmp_path / "a", BEGIN, slots=257, max_items=6000)
    assert a.put_batch(entries) == 3000
    rows = np.zeros(6000, dtype=ITEM_DTYPE)
    rows["fp"] = expected_fps(entries)
    for field, i in (("queue", 1), ("offset", 2), ("size", 3), ("time", 4)):
        rows[field] = np.repeat([e[i] for e in entries], 2)
    b = NativeIndexWriter.create(tmp_path / "b", BEGIN, slots=257, max_items=6000)
    assert b.put_items(rows.copy()) == 6000
    assert b.put_items(rows[:1]) == 0 and b.full
    for w in (a, b):
        w.seal()
        w.close()
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()
    c = NativeIndexWriter.create(tmp_path / "c", BEGIN, slots=8, max_items=8)
    with pytest.raises(ValueError, match="dtype"):
        c.put_items(np.zeros(2, dtype="<u8"))
    assert c.item_count == 0
    c.close()
