"""A plain-Python model of what an index file must answer, shared by the index_file tests."""

from __future__ import annotations

from collections.abc import Sequence

from index_file.model import IndexEntry


def java_hash(s: str) -> int:
    """Java String.hashCode written out independently of index_file.hashing (UTF-16 units)."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (h * 31 + int.from_bytes(data[i:i + 2], "big")) % (1 << 32)
    if h >= 1 << 31:
        h -= 1 << 32
    return abs(h) if h != -(1 << 31) else h


def newest_first(rows: list[tuple[int, int, int, int]], max_count: int) -> list[tuple[int, int, int, int]]:
    """(time, offset, queue, size) rows -> (queue, offset, size, time): newest first, then offset desc, then
    queue desc, one per (queue, offset), at most max_count."""
    rows.sort(reverse=True)
    out: list[tuple[int, int, int, int]] = []
    seen = set()
    for t, o, q, s in rows:
        if (q, o) not in seen and len(out) < max_count:
            seen.add((q, o))
            out.append((q, o, s, t))
    return out


def expected(entries: Sequence[IndexEntry], topic: str, key: str, max_count: int, begin: int, end: int,
             ) -> list[tuple[int, int, int, int]]:
    """(queue_id, offset, size, store_time_ms) the native format must return: exact key, time in
    [begin, end], newest first then offset desc then queue desc, one per (queue, offset), max_count."""
    rows = [(e.store_time_ms, e.offset, e.queue_id, e.size) for e in entries
            if e.topic == topic and key in e.keys and begin <= e.store_time_ms <= end]
    return newest_first(rows, max_count)


def expected_rocketmq(entries: Sequence[IndexEntry], begin_file: int, topic: str, key: str, max_count: int,
                      begin: int, end: int) -> list[tuple[int, int, int, int]]:
    """What the RocketMQ codec returns: every stored key whose Java hash equals the query's (false
    positives included), times kept to the second since the file's begin, the second [t, t+999]
    overlapping [begin, end]."""
    want = java_hash(f"{topic}#{key}")
    rows = []
    for e in entries:
        hits_key = any(java_hash(f"{e.topic}#{k}") == want for k in dict.fromkeys(e.keys))
        if not hits_key:
            continue
        d = e.store_time_ms - begin_file
        secs = d // 1000 if d >= 0 else -((-d) // 1000)  # Java's truncating division
        t = begin_file + secs * 1000
        lo, hi = (t, t + 999) if secs >= 0 else (t - 999, t)
        if hi >= begin and lo <= end:
            rows.append((t, e.offset, e.queue_id, e.size))
    return newest_first(rows, max_count)


def as_rows(hits: Sequence[object]) -> list[tuple[int, int, int, int]]:
    return [(h.queue_id, h.offset, h.size, h.store_time_ms) for h in hits]  # type: ignore[attr-defined]
