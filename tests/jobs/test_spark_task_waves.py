"""plan.in_waves: the JVM reader's tasks, as many as make whole waves of the executor's slots, of equal bytes, every
offset of every split read once and in order."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.spark_source.plan import Split, in_waves


def _splits(parts: list[tuple[int, int, int]]) -> list[Split]:
    """Splits of (object, offsets, estimated bytes), each object's offsets following the last's in one stream."""
    out, at = [], 0
    for obj, offsets, est in parts:
        out.append(Split("t", 0, 7, obj, "SO", f"o/{obj}", 1 << 30, at, at + offsets, est))
        at += offsets
    return out


def _offsets(tasks: list[list[Split]]) -> list[tuple[int, int]]:
    return [(s.object_id, o) for t in tasks for s in t for o in range(s.start, s.end)]


parts = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 400), st.integers(1, 5000)), min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(parts=parts, task_bytes=st.integers(1, 20000), slots=st.integers(1, 8))
def test_every_offset_is_read_once_in_order(parts: list[tuple[int, int, int]], task_bytes: int, slots: int) -> None:
    splits = _splits(parts)
    tasks = in_waves(splits, task_bytes, slots)
    assert _offsets(tasks) == _offsets([splits])
    count = math.ceil(math.ceil(sum(s.est_bytes for s in splits) / task_bytes) / slots) * slots
    assert 0 < len(tasks) <= count and all(tasks)
    for t in tasks:  # adjacent pieces of one object in a task are one split
        assert all((a.object_id, a.end) != (b.object_id, b.start) for a, b in zip(t, t[1:], strict=False))


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3000)), min_size=1, max_size=12),
       task_bytes=st.integers(50, 20000), slots=st.integers(1, 8))
def test_tasks_fill_whole_waves_with_equal_shares(parts: list[tuple[int, int]], task_bytes: int, slots: int) -> None:
    """A byte an offset (every cut exact): a multiple of `slots` tasks, none above task_bytes, their shares equal
    to within a byte a piece."""
    splits = _splits([(obj, n, n) for obj, n in parts])
    total = sum(n for _obj, n in parts)
    tasks = in_waves(splits, task_bytes, slots)
    count = math.ceil(math.ceil(total / task_bytes) / slots) * slots
    if total >= count:
        assert len(tasks) == count
    for t in tasks:
        got = sum(s.end - s.start for s in t)
        assert abs(got - total / count) <= 1 and got <= task_bytes
        assert sum(s.est_bytes for s in t) == got


def test_nine_tasks_of_two_slots_become_ten() -> None:
    """A gigabyte in parts of 64 MB, tasks of 128 MiB at most, two slots: 10 tasks of a tenth each, not 9."""
    splits = _splits([(i // 2, 1000, 64_000_000) for i in range(17)])
    tasks = in_waves(splits, 128 << 20, 2)
    assert len(tasks) == 10
    assert {sum(s.est_bytes for s in t) for t in tasks} <= {108_800_000, 108_799_999, 108_800_001}
    assert in_waves([], 128 << 20, 2) == []
