"""A page of messages over several partitions of a topic, merged by store time: the console's message browser
(next, previous, from an offset, from a time, the newest N, the live tail) in one request.

A page is given by positions, one offset per partition: `forward` takes the first `n` messages at or after them,
`backward` the last `n` before them. Each partition is read in offset order and only its next message (its
head) competes in the merge, so a page takes a run of consecutive messages of each partition: the positions
after a page (`next`) continue exactly where it stopped, and paging forward from any positions shows every
message once. Among the heads the one with the smallest (store time, partition, offset) goes first (backward:
the largest goes last). When each partition's store times do not go down with its offsets (the server's append
times), this is the order of the whole topic by store time, and a backward page from a page's `start` is the page
before it.

Each partition is read in chunks, the first about 2n / partitions messages, doubling while its messages keep
winning: a page of 20 over 1,000 partitions reads a few messages of each, not 20.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: (partition, offset, count) -> (up to count messages from offset on, the offset to continue from)
Read = Callable[[int, int, int], tuple[list[Any], int]]
MAX_CHUNK = 1000


@dataclass
class Page:
    messages: list[Any]  # oldest first: (store time, partition, offset)
    start: dict[int, int]  # each partition's first offset shown (its position when none is)
    next: dict[int, int]  # each partition's offset after the last shown (its position when none is)


def _key(m: Any) -> tuple[int, int, int]:
    return (m.timestamp, m.partition, m.offset)


def _first_chunk(n: int, partitions: int) -> int:
    return max(2, min(n, -(-2 * n // max(1, partitions))))


def _merge(buffers: dict[int, deque[Any]], refill: Callable[[int], None], key: Callable[[Any], Any],
           n: int) -> list[Any]:
    """Up to `n` messages taken from the partitions' buffers, always the head with the smallest `key`; a buffer
    taken empty is refilled (`refill`) before its partition competes again."""
    heap: list[tuple[Any, int]] = []
    for p in buffers:
        refill(p)
        if buffers[p]:
            heap.append((key(buffers[p][0]), p))
    heapq.heapify(heap)
    taken: list[Any] = []
    while heap and len(taken) < n:
        _, p = heapq.heappop(heap)
        taken.append(buffers[p].popleft())
        refill(p)
        if buffers[p]:
            heapq.heappush(heap, (key(buffers[p][0]), p))
    return taken


def forward(read: Read, positions: dict[int, int], bounds: dict[int, tuple[int, int]], n: int) -> Page:
    """The first `n` messages at or after `positions` (clamped to each partition's `bounds`: start, end)."""
    pos = {p: min(max(o, bounds[p][0]), bounds[p][1]) for p, o in positions.items()}
    at, size = dict(pos), dict.fromkeys(pos, _first_chunk(n, len(pos)))  # the next offset to read, chunk size
    buffers: dict[int, deque[Any]] = {p: deque() for p in pos}

    def refill(p: int) -> None:
        end = bounds[p][1]
        while not buffers[p] and at[p] < end:
            got, nxt = read(p, at[p], min(size[p], end - at[p]))
            buffers[p].extend(m for m in got if at[p] <= m.offset < end)
            if nxt <= at[p]:
                at[p] = end  # no progress: nothing more to read there now
            else:
                at[p] = nxt
            size[p] = min(2 * size[p], MAX_CHUNK)

    shown = _merge(buffers, refill, _key, n)
    nxt = dict(pos)
    for m in shown:
        nxt[m.partition] = m.offset + 1
    start = dict(pos)
    for m in reversed(shown):
        start[m.partition] = m.offset
    return Page(shown, start, nxt)


def backward(read: Read, positions: dict[int, int], bounds: dict[int, tuple[int, int]], n: int) -> Page:
    """The last `n` messages before `positions` (clamped to each partition's `bounds`: start, end)."""
    pos = {p: min(max(o, bounds[p][0]), bounds[p][1]) for p, o in positions.items()}
    below, size = dict(pos), dict.fromkeys(pos, _first_chunk(n, len(pos)))  # read below this offset next
    buffers: dict[int, deque[Any]] = {p: deque() for p in pos}  # newest first

    def refill(p: int) -> None:
        start = bounds[p][0]
        while not buffers[p] and below[p] > start:
            lo = max(start, below[p] - size[p])
            got, _ = read(p, lo, below[p] - lo)
            buffers[p].extend(m for m in reversed(got) if lo <= m.offset < below[p])
            below[p] = lo
            size[p] = min(2 * size[p], MAX_CHUNK)

    taken = _merge(buffers, refill, lambda m: (-m.timestamp, -m.partition, -m.offset), n)
    start = dict(pos)
    for m in taken:
        start[m.partition] = m.offset
    taken.reverse()
    return Page(taken, start, dict(pos))
