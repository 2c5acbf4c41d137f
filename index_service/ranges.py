"""Offset ranges: which (topic, queue) offsets each index file holds, so a file expires when the broker
has trimmed every range in it (the index follows the data) instead of at a fixed age.

    ranges = {("orders", 0): (10, 420), ("orders", 1): (7, 388)}   # lowest and highest offset per queue

The writer extends the WRITING file's ranges as it writes; they are saved in the checkpoint with every
batch, and in `ranges/<stem>.json` when the file is sealed. That document stays until the file expires.
Files without one (RocketMQ imports, external builds, files written before ranges existed) have unknown
ranges: only an explicit index-only retention (ServiceConfig.retention_ms) expires them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from index_service.state_folders import DocumentError, StateFolders

QueueKey = tuple[str, int]
Ranges = dict[QueueKey, tuple[int, int]]
#: is_live(topic, queue_id, max_offset): whether the broker still stores any offset <= max_offset of the
#: queue's range, i.e. max_offset >= the partition's start offset
IsLive = Callable[[str, int, int], bool]

RANGES = "ranges"


def extend(ranges: Ranges, records: Iterable[tuple[Any, ...]]) -> None:
    """Widen `ranges` by records (topic, queue_id, offset, ...)."""
    for r in records:
        k = (r[0], r[1])
        off = r[2]
        cur = ranges.get(k)
        if cur is None:
            ranges[k] = (off, off)
        elif off < cur[0] or off > cur[1]:
            ranges[k] = (min(cur[0], off), max(cur[1], off))


def to_body(ranges: Mapping[QueueKey, tuple[int, int]]) -> list[list[Any]]:
    return [[t, q, lo, hi] for (t, q), (lo, hi) in sorted(ranges.items())]


def from_body(name: str, body: object) -> Ranges:
    if not isinstance(body, list):
        raise DocumentError(f"{name}: ranges must be a list, got {type(body).__name__}")
    out: Ranges = {}
    for row in body:
        if not (isinstance(row, list) and len(row) == 4 and isinstance(row[0], str)
                and all(type(v) is int for v in row[1:]) and row[2] <= row[3]):
            raise DocumentError(f"{name}: a range row is [topic, queue, lowest, highest], got {row!r}")
        out[(row[0], row[1])] = (row[2], row[3])
    return out


def path(folders: StateFolders, stem: str) -> Path:
    d = folders.root / RANGES
    d.mkdir(exist_ok=True)
    return d / f"{stem}.json"


def save(folders: StateFolders, stem: str, ranges: Ranges) -> None:
    folders.write_document(path(folders, stem), {"version": 1, "file": stem, "ranges": to_body(ranges)})


def load(folders: StateFolders, stem: str) -> Ranges | None:
    """The saved ranges of a file; None when it has none. A damaged document is quarantined (the file's
    ranges become unknown: it is kept until an explicit index retention, never expired early)."""
    p = path(folders, stem)
    if not p.exists():
        return None
    try:
        return from_body(str(p), folders.read_document(p).get("ranges"))
    except DocumentError as exc:
        folders.quarantine(p, str(exc), "RANGES")
        return None


def remove(folders: StateFolders, stem: str) -> None:
    folders.remove(path(folders, stem))


def all_trimmed(ranges: Ranges | None, is_live: IsLive) -> bool:
    """True when the file holds ranges and the broker has trimmed every one of them."""
    if not ranges:
        return False
    return not any(is_live(t, q, hi) for (t, q), (_lo, hi) in ranges.items())
