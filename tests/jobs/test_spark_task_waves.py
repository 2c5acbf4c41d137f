"""plan.in_waves: the JVM reader's tasks, as many as make whole waves of the executor's slots, of equal bytes, every
offset of every split read once and in order; with columnar.TaskSizing, the task count of a read without
`maxSplitBytes`."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.spark_source.columnar import TaskSizing
from jobs.spark_source.plan import Split, in_waves


def _splits(parts: list[tuple[int, int, int]]) -> list[Split]:
    """Splits of (object, offsets, estimated bytes): objects 0-1 in the stream of partition 0, 2-3 in the
    stream of partition 1, each split's offsets following the last one's of its stream."""
    out, at = [], {0: 0, 1: 0}
    for obj, offsets, est in parts:
        part = obj // 2
        out.append(Split("t", part, 70 + part, obj, "SO", f"o/{obj}", 1 << 30, at[part], at[part] + offsets, est))
        at[part] += offsets
    return out


def _offsets(tasks: list[list[Split]]) -> list[tuple[object, ...]]:
    """Every offset read, in order, with what names its record's place (topic, partition, stream, object, key)."""
    return [(s.topic, s.partition, s.stream_id, s.object_id, s.kind, s.key, s.size, o)
            for t in tasks for s in t for o in range(s.start, s.end)]


def _count(total: int, task_bytes: int, slots: int) -> int:
    count = math.ceil(total / task_bytes)
    return count if count <= slots else math.ceil(count / slots) * slots


parts = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 400), st.integers(1, 5000)), min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(parts=parts, task_bytes=st.integers(1, 20000), slots=st.integers(1, 8))
def test_every_offset_is_read_once_in_order(parts: list[tuple[int, int, int]], task_bytes: int, slots: int) -> None:
    splits = _splits(parts)
    tasks = in_waves(splits, task_bytes, slots)
    assert _offsets(tasks) == _offsets([splits])
    assert 0 < len(tasks) <= _count(sum(s.est_bytes for s in splits), task_bytes, slots)
    pieces = sum(len(t) for t in tasks)
    assert abs(sum(s.est_bytes for t in tasks for s in t) - sum(s.est_bytes for s in splits)) <= 2 * pieces
    for t in tasks:  # adjacent pieces of one object in a task are one split; no piece is empty
        assert all(s.end > s.start and s.est_bytes >= 1 for s in t)
        assert all((a.stream_id, a.object_id, a.end) != (b.stream_id, b.object_id, b.start)
                   for a, b in zip(t, t[1:], strict=False))


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3000)), min_size=1, max_size=12),
       per=st.integers(1, 5), task_bytes=st.integers(50, 20000), slots=st.integers(1, 8))
def test_tasks_fill_whole_waves_with_equal_shares(parts: list[tuple[int, int]], per: int, task_bytes: int,
                                                  slots: int) -> None:
    """`per` bytes an offset (every cut exact): the tasks are whole waves when more than `slots`, none above
    task_bytes by more than an offset's bytes, their shares equal to within them, each piece's bytes its
    offsets' bytes."""
    splits = _splits([(obj, n, n * per) for obj, n in parts])
    total = per * sum(n for _obj, n in parts)
    tasks = in_waves(splits, task_bytes, slots)
    count = _count(total, task_bytes, slots)
    if total >= count * per:
        assert len(tasks) == count
    for t in tasks:
        got = sum(s.est_bytes for s in t)
        assert all(s.est_bytes == per * (s.end - s.start) for s in t)
        assert abs(got - total / count) <= per and got <= task_bytes + per


def test_nine_tasks_of_two_slots_become_ten() -> None:
    """A gigabyte in parts of 64 MB, tasks of 128 MiB at most, two slots: 10 tasks of a tenth each, not 9."""
    splits = _splits([(i % 2, 1000, 64_000_000) for i in range(17)])
    tasks = in_waves(splits, 128 << 20, 2)
    assert len(tasks) == 10
    assert {sum(s.est_bytes for s in t) for t in tasks} <= {108_800_000, 108_799_999, 108_800_001}
    assert in_waves([], 128 << 20, 2) == []


@settings(max_examples=200, deadline=None)
@given(total=st.integers(1, 40 << 30), parallelism=st.integers(1, 256))
def test_a_read_sized_as_spark_sizes_a_file_source_gets_no_more_tasks_than_it_needs(total: int,
                                                                                    parallelism: int) -> None:
    """Spark's defaults (128 MiB, 4 MiB): a read of at most parallelism x 128 MiB is one wave of at most
    `parallelism` tasks, none below half what openCostInBytes allows (equal shares of a little more than it),
    and a larger one whole waves of at most 128 MiB."""
    sizing = TaskSizing(128 << 20, 4 << 20, parallelism)
    splits = _splits([(0, total, total)])
    tasks = in_waves(splits, sizing.task_bytes(total), parallelism)
    sizes = [sum(s.est_bytes for s in t) for t in tasks]
    if total <= parallelism * (128 << 20):
        assert len(tasks) <= parallelism
        assert len(tasks) == 1 or min(sizes) >= (2 << 20)
    else:
        assert len(tasks) % parallelism == 0 and max(sizes) <= 128 << 20
        assert len(tasks) < math.ceil(total / (128 << 20)) + parallelism
