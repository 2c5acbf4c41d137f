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


def test_the_compiled_reader_is_built_and_hashes_with_xxhash() -> None:
    """`pip install` (make test) builds index_file/_entry_columns, and it finds xxhash's C function."""
    from index_file import entry_columns as module

    assert module._compiled is not None and module._compiled.hash_ready()
    cols = entry_columns([("orders", 0, 1, 2, BEGIN, ["é-key"])], with_fingerprints=True)
    assert cols.fps is not None and cols.fps.tolist() == [fingerprint("orders", "é-key")]


odd_int = st.one_of(st.integers(-2**63, 2**63 - 1), st.integers(2**63, 2**70), st.integers(-2**70, -2**63 - 1),
                    st.booleans(), st.floats(allow_nan=False, allow_infinity=False), st.none())
odd_key = st.one_of(texts, st.just("\ud800"), st.integers(), st.none())
odd_keys = st.one_of(odd_key, st.lists(odd_key, max_size=3), st.tuples(odd_key), st.tuples(odd_key, odd_key))
odd_topic = st.one_of(st.sampled_from(["orders", "pay-é", "t", "\udcff"]), st.integers(), st.none())


@st.composite
def odd_entry(draw: st.DrawFn) -> object:
    fields = (draw(odd_topic), draw(odd_int), draw(odd_int), draw(odd_int), draw(odd_int), draw(odd_keys))
    shape = draw(st.sampled_from(["tuple", "entry", "list", "short", "long", "scalar"]))
    if shape == "entry":
        return IndexEntry(*fields)  # type: ignore[arg-type]
    if shape == "list":
        return list(fields)
    if shape == "short":
        return fields[:5]
    if shape == "long":
        return (*fields, 0)
    if shape == "scalar":
        return 7
    return fields


def _outcome(entries: list[object], with_fingerprints: bool, strict: bool) -> object:
    try:
        c = entry_columns(entries, with_fingerprints=with_fingerprints, strict=strict)  # type: ignore[arg-type]
    except Exception as exc:  # noqa: BLE001 - the error is part of what is compared
        return type(exc).__name__, str(exc)
    return (c.topics, c.keys, c.queue.tolist(), c.offset.tolist(), c.size.tolist(), c.time.tolist(),
            None if c.fps is None else c.fps.tolist(), c.counts)


@settings(max_examples=300, deadline=None)
@given(st.lists(entry, max_size=20), st.lists(odd_entry(), max_size=3), st.integers(0, 20), st.booleans(),
       st.booleans())
def test_the_compiled_reader_gives_what_the_python_path_gives(good: list[tuple], odd: list[object], at: int,
                                                              with_fingerprints: bool, strict: bool) -> None:
    """Any batch, of the common shape or not: the same columns, fingerprints and key counts, or the same error."""
    from index_file import entry_columns as module

    entries: list[object] = [*good[:at], *odd, *good[at:]]
    compiled = _outcome(entries, with_fingerprints, strict)
    saved, module._compiled = module._compiled, None
    try:
        assert _outcome(entries, with_fingerprints, strict) == compiled
    finally:
        module._compiled = saved
