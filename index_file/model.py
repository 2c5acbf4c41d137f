"""What goes into an index file and what comes out: IndexEntry, IndexHit, AppendResult.

An IndexEntry is one stored record: its location (topic, queue_id = partition, offset, size), its
store time in milliseconds and the keys it is found by. A plain 6-tuple in the same field order is
accepted wherever an IndexEntry is (the fast path for bulk writers).

An IndexHit is one answer to a query. `exact` says how the key was compared:
- native format: True, the 64-bit xxh3 fingerprint of `topic#key` matched. A different key
  answers only on a 64-bit fingerprint collision; the caller, which fetches the record at
  (queue_id, offset) anyway, checks that the record really carries `key` to rule even that out.
- RocketMQ format: False, only the 32-bit Java hash matched (`Aa` and `BB` collide), so the hit
  is a candidate that the caller must verify against the fetched record.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import NamedTuple


class IndexEntry(NamedTuple):
    topic: str
    queue_id: int
    offset: int
    size: int
    store_time_ms: int
    keys: Sequence[str]


class IndexHit(NamedTuple):
    topic: str
    queue_id: int
    offset: int
    size: int
    store_time_ms: int
    key: str
    exact: bool


class AppendResult(enum.Enum):
    SUCCESS = "SUCCESS"
    FULL = "FULL"  # the put would exceed the file's capacity; nothing of it was stored


def unique_keys(keys: Iterable[str] | str) -> list[str]:
    """An entry's keys without repeats, in first-seen order (a record whose key also appears in its
    KEYS header is indexed once). A bare string is one key, not a sequence of characters."""
    if isinstance(keys, str):
        return [keys]
    out: list[str] = []
    for k in keys:
        if k not in out:
            out.append(k)
    return out


def check_range(begin_ms: int, end_ms: int | None, max_count: int) -> tuple[int, int]:
    if max_count < 0:
        raise ValueError(f"max_count must be >= 0, got {max_count}")
    end = (1 << 63) - 1 if end_ms is None else int(end_ms)
    return int(begin_ms), end


def finish_hits(hits: Iterable[IndexHit], max_count: int) -> list[IndexHit]:
    """The query contract shared by every reader: newest store time first, then offset desc (then
    queue desc, so the order is total), one hit per (queue_id, offset), exactly
    min(max_count, matches) hits."""
    ordered = sorted(hits, key=lambda h: (h.store_time_ms, h.offset, h.queue_id), reverse=True)
    out: list[IndexHit] = []
    seen: set[tuple[int, int]] = set()
    for h in ordered:
        if len(out) >= max_count:
            break
        loc = (h.queue_id, h.offset)
        if loc not in seen:
            seen.add(loc)
            out.append(h)
    return out
