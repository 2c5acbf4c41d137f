"""A batch whose records carry different numbers of keys (none, one, several) answers every key with the offsets
of the records that carry it, on the compiled append and on the numpy one: a batch whose key counts only sum to
its record count (a record without keys beside one with two) is not written as one item per record."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from index_file import NativeIndexWriter, native_unsealed

BEGIN = 1_700_000_000_000
TOPIC = "orders"
KEY_NAMES = [f"k{i}" for i in range(6)]

# per record: its keys (0 to 3 of a few names, so records share keys); a batch of 1 to 40 records
records = st.lists(st.lists(st.sampled_from(KEY_NAMES), min_size=0, max_size=3), min_size=1, max_size=40)


@contextmanager
def append_path(compiled: bool) -> Iterator[None]:
    """The compiled append (index_file/_item_chain.pyx) or the numpy one, both real write paths."""
    saved = native_unsealed._chain
    if not compiled:
        native_unsealed._chain = None
    try:
        yield
    finally:
        native_unsealed._chain = saved


def offsets_by_key(batches: list[list[list[str]]]) -> tuple[list[list[tuple]], dict[str, set[int]]]:
    """The batches as put_batch records (offsets numbered across them) and the plain model: key -> offsets."""
    out: list[list[tuple]] = []
    model: dict[str, set[int]] = {}
    offset = 0
    for batch in batches:
        recs = []
        for keys in batch:
            recs.append((TOPIC, 0, offset, 100, BEGIN + offset, list(keys)))
            for k in keys:
                model.setdefault(k, set()).add(offset)
            offset += 1
        out.append(recs)
    return out, model


def check(batches: list[list[list[str]]], compiled: bool) -> None:
    recs, model = offsets_by_key(batches)
    with tempfile.TemporaryDirectory() as d, append_path(compiled):
        path = Path(d) / "w.mqxu"
        w = NativeIndexWriter.create(path, BEGIN, slots=7, max_items=1000)
        try:
            for b in recs:
                assert w.put_batch(b) == len(b)
            for k in KEY_NAMES:
                assert {h.offset for h in w.query(TOPIC, k, max_count=1000)} == model.get(k, set()), k
        finally:
            w.close()
        # and the same answers after the file is reopened (recovered from its content)
        r = NativeIndexWriter.open(path)
        try:
            for k in KEY_NAMES:
                assert {h.offset for h in r.query(TOPIC, k, max_count=1000)} == model.get(k, set()), k
        finally:
            r.close()


def test_a_record_without_keys_beside_one_with_two() -> None:
    recs = [(TOPIC, 0, 1, 100, BEGIN, []), (TOPIC, 0, 2, 100, BEGIN, ["a", "b"])]
    for compiled in (True, False):
        with tempfile.TemporaryDirectory() as d, append_path(compiled):
            w = NativeIndexWriter.create(Path(d) / "w.mqxu", BEGIN, slots=16, max_items=100)
            assert w.put_batch(recs) == 2
            assert [h.offset for h in w.query(TOPIC, "a")] == [2]
            assert [h.offset for h in w.query(TOPIC, "b")] == [2]
            w.close()


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
@settings(max_examples=200, deadline=None)
@given(batches=st.lists(records, min_size=1, max_size=4))
def test_random_key_counts_per_record_answer_like_a_dict(compiled: bool, batches: list[list[list[str]]]) -> None:
    check(batches, compiled)
