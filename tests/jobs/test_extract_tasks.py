"""The extract's object parts: large parts cut into offset ranges that cover them exactly, packed into tasks
of about equal offsets, largest first."""

from __future__ import annotations

import random

from jobs.spark_build import PartTask, balanced_slices, split_parts


def _parts() -> list[PartTask]:
    rng = random.Random(5)
    out = []
    start = 0
    for i in range(23):
        n = rng.choice([1, 10, 5_000, 40_000, 250_000])
        out.append(PartTask(i % 4, 100 + i % 4, f"o/{i}", 1000, start, start + n))
        start += n
    return out


def test_split_parts_cover_each_part_exactly_once() -> None:
    parts = _parts()
    for pieces in (1, 4, 8, 64):
        out = split_parts(parts, pieces)
        target = sum(p.end - p.start for p in parts) / pieces
        for p in parts:
            mine = sorted((q.start, q.end) for q in out if q.key == p.key)
            assert mine[0][0] == p.start and mine[-1][1] == p.end
            assert all(a[1] == b[0] for a, b in zip(mine, mine[1:], strict=False))
            assert all(q.stream_id == p.stream_id and q.partition == p.partition for q in out if q.key == p.key)
            assert all(e - s <= max(p.end - p.start, 1.5 * target) for s, e in mine)


def test_balanced_slices_keep_every_piece_and_even_the_load() -> None:
    pieces = split_parts(_parts(), 8)
    groups = balanced_slices(pieces, 8)
    assert sorted((t.key, t.start) for g in groups for t in g) == sorted((t.key, t.start) for t in pieces)
    loads = [sum(t.end - t.start for t in g) for g in groups]
    assert loads == sorted(loads, reverse=True) and len(groups) <= 8
    assert max(loads) - min(loads) <= max(t.end - t.start for t in pieces)
    assert balanced_slices(pieces[:3], 8) and len(balanced_slices(pieces[:3], 8)) == 3
