"""The writer's fast path over a whole batch: when every record of a batch is new (its offset above the
highest one taken for its (topic, queue), offsets rising within the batch) and has keys, the per-record
dedup, range and checkpoint bookkeeping reduce to one (lowest, highest) offset per queue, computed here
with numpy instead of a Python loop per record (that loop was a third of the write path: see
docs/BENCHMARKS.md, "Index write path"). Any other batch returns None and takes the general loop, so the
result is the same record for record.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from index_file.entry_columns import EntryColumns, entry_columns
from index_file.sorting import stable_order

QueueKey = tuple[str, int]
Spans = dict[QueueKey, tuple[int, int]]  # per queue of the batch: lowest and highest offset
Columns = EntryColumns

_Q_BITS = 31  # queue ids are validated into [0, 2**31)


def write_groups(records: list[Any], parts: list[Columns] | None, at_least: int
                 ) -> Iterator[tuple[list[Any], Columns | None]]:
    """The records of batches submitted one after the other, with their columns (`parts`, one per batch; None
    when any came without), in groups of whole batches of at least `at_least` records where the batches allow:
    a large batch is written with its own columns, small ones are joined (joining costs about as much per
    record as writing, so large batches are not joined)."""
    if not parts:
        yield records, None
        return
    if len(parts) == 1:
        yield records, parts[0]
        return
    at = 0
    group: list[Columns] = []
    size = 0
    for i, p in enumerate(parts):
        group.append(p)
        size += len(p)
        if size >= at_least or i == len(parts) - 1:
            yield records[at:at + size], EntryColumns.join(group)
            at += size
            group, size = [], 0


def queue_groups(topics: Sequence[str], q: np.ndarray) -> tuple[list[str], int, np.ndarray]:
    """A dense group id per entry of (topic, queue id): topic number * width + queue id, where width is the
    highest queue id + 1 (queue ids non-negative). Returns the topics in order of first sight, the width and
    the ids; group id g is the queue (names[g // width], g % width)."""
    names = list(dict.fromkeys(topics))
    width = int(q.max()) + 1
    if len(names) == 1:
        return names, width, q
    index = {t: i * width for i, t in enumerate(names)}
    return names, width, np.fromiter(map(index.__getitem__, topics), dtype=np.int64, count=len(q)) + q


def fresh_spans(batch: Sequence[Sequence[Any]], accepted: Mapping[QueueKey, int],
                columns: Columns | None = None) -> Spans | None:
    """The batch's spans when every record is taken in order and carries at least one key, else None.
    `columns`: entry_columns(batch), when the caller has them."""
    n = len(batch)
    if n == 0:
        return None
    try:
        cols = entry_columns(batch) if columns is None else columns
    except (TypeError, ValueError, OverflowError):
        return None
    q, off, topics, keys = cols.queue, cols.offset, cols.topics, cols.keys
    if q.min() < 0 or q.max() >= 1 << _Q_BITS:
        return None
    one_key_each = cols.fps is not None and cols.counts is None and len(cols.fps) == n  # no record without keys
    if not one_key_each and 0 in set(map(len, keys)):  # type: ignore[arg-type]
        return None
    names, width, gid = queue_groups(topics, q)  # dense, so the radix sort applies
    order = stable_order(gid, width * len(names))
    g = gid[order]
    o = off[order]
    first = np.ones(n, dtype=bool)
    first[1:] = g[1:] != g[:-1]
    if not np.all((o[1:] > o[:-1]) | first[1:]):  # not rising within a queue: the general loop decides
        return None
    last = np.ones(n, dtype=bool)
    last[:-1] = first[1:]
    groups = g[first]
    los = o[first].tolist()
    his = o[last].tolist()
    spans: Spans = {}
    for gv, lo, hi in zip(groups.tolist(), los, his, strict=True):
        k = (names[gv // width], gv % width)
        prev = accepted.get(k)
        if prev is not None and lo <= prev:  # a re-dispatched record: the general loop drops it
            return None
        spans[k] = (lo, hi)
    return spans


def widen(ranges: dict[QueueKey, tuple[int, int]], spans: Mapping[QueueKey, tuple[int, int]]) -> None:
    """ranges.extend for a batch given as its spans."""
    for k, (lo, hi) in spans.items():
        cur = ranges.get(k)
        ranges[k] = (lo, hi) if cur is None else (min(cur[0], lo), max(cur[1], hi))
