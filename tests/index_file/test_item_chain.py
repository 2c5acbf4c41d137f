"""The compiled item append (index_file/_item_chain.pyx) writes the file the numpy append writes, byte for byte:
the same items, next pointers, check words, slot heads, checkpoints and checksums, for batches of one key per
entry (written straight from the columns) and of several (written as rows), cut over files and chunks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from index_file import IndexEntry, NativeIndexWriter, native_unsealed
from index_file.native_unsealed import ITEM_DTYPE, item_checks

BEGIN = 1_700_000_000_000
keys = st.one_of(st.text(min_size=1, max_size=6), st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=3))
entries = st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 2**31 - 1), st.integers(0, 2**62),
                             st.integers(0, 2**31 - 1), st.integers(-2**62, 2**62), keys), max_size=60)


@contextmanager
def numpy_append() -> Iterator[None]:
    saved, native_unsealed._chain = native_unsealed._chain, None
    try:
        yield
    finally:
        native_unsealed._chain = saved


def write(path: Path, batches: list[list[tuple]], slots: int, max_items: int, rows: bool) -> list[bytes]:
    """The file's bytes after each batch and after sealing."""
    w = NativeIndexWriter.create(path, BEGIN, slots=slots, max_items=max_items)
    seen = []
    for b in batches:
        if rows:
            items = np.zeros(len(b), dtype=ITEM_DTYPE)
            items["fp"] = [hash(e[5] if isinstance(e[5], str) else e[5][0]) % 2**64 for e in b]
            for field, i in (("queue", 1), ("offset", 2), ("size", 3), ("time", 4)):
                items[field] = [e[i] for e in b]
            w.put_items(items)
        else:
            w.put_batch(b)
        seen.append(path.read_bytes())
    w.seal()
    w.close()
    seen.append(path.read_bytes())
    return seen


def test_the_compiled_append_is_built() -> None:
    assert native_unsealed._chain is not None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(entries, min_size=1, max_size=4), st.sampled_from([1, 3, 64, 4099]), st.integers(1, 200),
       st.booleans())
def test_the_compiled_append_writes_the_numpy_file(tmp_path: Path, batches: list[list[tuple]], slots: int,
                                                   max_items: int, rows: bool) -> None:
    for f in ("c", "n"):
        (tmp_path / f).unlink(missing_ok=True)
    compiled = write(tmp_path / "c", batches, slots, max_items, rows)
    with numpy_append():
        reference = write(tmp_path / "n", batches, slots, max_items, rows)
    assert compiled == reference


def test_chunks_and_check_words_over_a_large_batch(tmp_path: Path) -> None:
    """More than one CHUNK_ITEMS chunk in one call; every check word is item_checks' and every key is found."""
    n = native_unsealed.CHUNK_ITEMS + 1234
    batch = [IndexEntry("t", i % 9, i, 7, BEGIN + i, (f"k{i}",)) for i in range(n)]
    w = NativeIndexWriter.create(tmp_path / "big", BEGIN, slots=1021, max_items=n + 10)
    assert w.put_batch(batch) == n
    items = w.items()
    assert (items["check"] == item_checks(items, 0)).all()
    for i in (0, native_unsealed.CHUNK_ITEMS - 1, native_unsealed.CHUNK_ITEMS, n - 1):
        hits = w.query("t", f"k{i}")
        assert [(h.queue_id, h.offset) for h in hits] == [(i % 9, i)]
    w.close()
