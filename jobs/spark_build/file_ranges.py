"""Step 3: the extracted items' store-time histogram, and each window cut into file ranges of at most
`max_items` items."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from jobs import index_items
from jobs.spark_build.options import Entry


def _as_items(entries: list[Entry] | np.ndarray) -> np.ndarray:
    """Item rows of (partition, offset, size, store time, keys) entries (fingerprints left 0: for counting and
    cutting only); item rows are returned as they are."""
    if isinstance(entries, np.ndarray):
        return entries
    out = np.zeros(sum(len(e[4]) for e in entries), dtype=index_items.ITEM_ROW)
    counts = [len(e[4]) for e in entries]
    for field_name, i in (("partition", 0), ("offset", 1), ("size", 2), ("time", 3)):
        out[field_name] = np.repeat(np.array([e[i] for e in entries], dtype=np.int64), counts)
    return out


BUCKET_MS = 10  # resolution of the store-time histogram files are cut by


def bucket_counts(items: Iterable[tuple[int, list[Entry] | np.ndarray]]
                  ) -> Iterator[tuple[tuple[int, int], tuple[int, int]]]:
    """Executor: ((window, store time // BUCKET_MS), (records, items)) summed over one Spark partition."""
    acc: dict[tuple[int, int], tuple[int, int]] = {}
    for w, entries in items:
        for b, records, n in index_items.histogram(_as_items(entries), BUCKET_MS):
            c = acc.get((w, b), (0, 0))
            acc[(w, b)] = (c[0] + records, c[1] + n)
    yield from acc.items()


def add_counts(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return a[0] + b[0], a[1] + b[1]


def plan_files(buckets: dict[tuple[int, int], tuple[int, int]], max_items: int, window_ms: int) -> list[int]:
    """Start times of the file ranges: each window is cut, at histogram bucket boundaries, into as many
    time-contiguous ranges as its items need files (ceil(items / max_items)), of about equal size; a
    range never spans two windows. Ranges are built by separate Spark tasks; a range that exceeds
    max_items by a bucket's worth is cut once more by its task (file_chunks)."""
    starts: list[int] = []
    by_window: dict[int, list[tuple[int, int]]] = {}
    for (w, b), (_r, n) in buckets.items():
        by_window.setdefault(w, []).append((b, n))
    for w in sorted(by_window):
        bs = sorted(by_window[w])
        total = sum(n for _b, n in bs)
        n_files = math.ceil(total / max_items)
        cum = 0
        last = -1
        for b, n in bs:  # a bucket goes to the range its middle item falls in
            r = min(n_files - 1, (2 * cum + n) * n_files // (2 * total))
            if r != last:
                starts.append(max(b * BUCKET_MS, w * window_ms))
                last = r
            cum += n
    return starts


def assign_ranges(starts: list[int]) -> Callable[[Iterable[tuple[int, Any]]], Iterator[tuple[int, Any]]]:
    """Executor: re-key entries from windows to file ranges (index of the range holding the store time);
    item rows stay arrays (one per range and Spark partition), entry lists stay lists."""

    def run(items: Iterable[tuple[int, Any]]) -> Iterator[tuple[int, Any]]:
        arrays: dict[int, list[np.ndarray]] = {}
        lists: dict[int, list[Entry]] = {}
        for _w, entries in items:
            if isinstance(entries, np.ndarray):
                for r, part in index_items.group_by(entries, index_items.range_index(entries["time"], starts)):
                    arrays.setdefault(r, []).append(part)
            else:
                ranges = index_items.range_index(np.array([e[3] for e in entries], dtype=np.int64), starts)
                for r, e in zip(ranges.tolist(), entries, strict=True):
                    lists.setdefault(r, []).append(e)
        for r, parts in arrays.items():
            yield r, parts[0] if len(parts) == 1 else np.concatenate(parts)
        yield from lists.items()

    return run


def file_chunks(entries: list[Entry], max_items: int) -> list[list[Entry]]:
    """Cut time-sorted entries into files of at most max_items items (keys), balanced: as many files as
    the items need, each filled to about the same size (index_items.file_cuts)."""
    try:
        cuts = index_items.file_cuts(np.array([len(e[4]) for e in entries], dtype=np.int64), max_items)
    except ValueError:
        e = next(e for e in entries if len(e[4]) > max_items)
        raise ValueError(f"record {e[0]}@{e[1]} has {len(e[4])} keys, more than a file holds ({max_items})") \
            from None
    return [entries[a:b] for a, b in zip(cuts, [*cuts[1:], len(entries)], strict=True) if b > a]
