"""The writer's groups of submitted batches: every record once, in order, each group with the columns of exactly
its records; a large batch keeps its own columns (not copied by a join)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from index_file.entry_columns import entry_columns
from index_service.batch_spans import write_groups


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=12), st.integers(1, 50))
def test_groups_hold_every_record_once_with_its_columns(sizes: list[int], at_least: int) -> None:
    records, parts = [], []
    for b, n in enumerate(sizes):
        batch = [("t", b, i, 1, 1000 + i, [f"k{b}-{i}"]) for i in range(n)]
        records += batch
        parts.append(entry_columns(batch, with_fingerprints=True))
    groups = list(write_groups(records, parts, at_least))
    assert [r for recs, _ in groups for r in recs] == records
    for recs, cols in groups:
        assert cols is not None and cols.keys == [r[5] for r in recs]
        assert cols.offset.tolist() == [r[2] for r in recs] and cols.fps is not None and len(cols.fps) == len(recs)
    assert all(len(recs) >= at_least for recs, _ in groups[:-1])
    # a batch that fills a group alone is written with its own columns, not a joined copy
    starts = [0]
    for recs, _ in groups:
        starts.append(starts[-1] + len(recs))
    for i, p in enumerate(parts):
        if len(p) >= at_least and sum(map(len, parts[:i])) in starts:
            assert any(cols is p for _, cols in groups)


def test_without_columns_the_whole_buffer_is_one_group() -> None:
    records = [("t", 0, i, 1, 1, ["k"]) for i in range(5)]
    assert list(write_groups(records, None, 2)) == [(records, None)]
    assert list(write_groups(records, [], 2)) == [(records, None)]
