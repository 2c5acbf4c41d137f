"""The Spark build's entries as numpy item arrays: one row per key of a record (store time, offset,
fingerprint, partition, size), made once on the executor that decodes the records and moved between
the stages as arrays (pickled as a few byte buffers), never as per-entry Python objects. Histogram,
re-keying to file ranges, sorting, de-duplication and the cut into files are numpy operations over them.

The rows of one record are adjacent in every array (they share store time, partition and offset, and
every reordering here is a stable sort on those).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator, Sequence

import numpy as np
import xxhash

from index_file.native_unsealed import ITEM_DTYPE

ITEM_ROW = np.dtype([("time", "<i8"), ("offset", "<i8"), ("fp", "<u8"), ("partition", "<i4"), ("size", "<i4")])

_xxh3 = xxhash.xxh3_64_intdigest
_OFFSET, _SIZE, _TIME, _KEYS = (operator.itemgetter(i) for i in range(4))


def record_items(topic: str, partition: int, entries: Sequence[Sequence[object]]) -> np.ndarray:
    """The item rows of one partition's entries (offset, size, store_time_ms, keys), in order; the
    fingerprint of each key is xxh3-64 of `topic#key` (UTF-8), as the online writer computes it."""
    n = len(entries)
    counts = np.fromiter(map(len, map(_KEYS, entries)), dtype=np.int64, count=n)
    keys = list(itertools.chain.from_iterable(map(_KEYS, entries)))
    out = np.empty(len(keys), dtype=ITEM_ROW)
    out["offset"] = np.repeat(np.fromiter(map(_OFFSET, entries), dtype=np.int64, count=n), counts)
    out["size"] = np.repeat(np.fromiter(map(_SIZE, entries), dtype=np.int64, count=n), counts)
    out["time"] = np.repeat(np.fromiter(map(_TIME, entries), dtype=np.int64, count=n), counts)
    out["partition"] = partition
    prefix = f"{topic}#"
    out["fp"] = np.fromiter(map(_xxh3, map(str.encode, map(operator.add, itertools.repeat(prefix), keys))),
                            dtype=np.uint64, count=len(keys))
    return out


def column_items(topic: str, partition: int, offset: np.ndarray, time: np.ndarray, size: np.ndarray,
                 counts: np.ndarray, keys: list[bytes]) -> np.ndarray:
    """The item rows of one partition's entries given as columns (broker/partitions/batch_columns.py:
    per record offset, store time, size and key count; the keys' UTF-8 bytes, flat, in record order), the
    same rows record_items makes of the same entries. A key repeated within one record (same fingerprint)
    keeps its first row only, as record_keys keeps a record's first occurrence of a key."""
    n_keys = len(keys)
    prefix = f"{topic}#".encode()
    fp = np.fromiter(map(_xxh3, map(prefix.__add__, keys)), dtype=np.uint64, count=n_keys)
    out = np.empty(n_keys, dtype=ITEM_ROW)
    out["offset"] = np.repeat(offset, counts)
    out["time"] = np.repeat(time, counts)
    out["size"] = np.repeat(size, counts)
    out["partition"] = partition
    out["fp"] = fp
    if len(counts) == 0 or int(counts.max()) < 2:
        return out
    dup = repeated(np.repeat(np.arange(len(counts)), counts), fp)
    return out if not dup.any() else out[~dup]


def repeated(group: np.ndarray, fp: np.ndarray) -> np.ndarray:
    """Bool per row: an earlier row of the same group has the same fingerprint (a group's rows adjacent)."""
    n = len(fp)
    dup = np.zeros(n, dtype=bool)
    if n < 2:
        return dup
    starts = np.flatnonzero(np.concatenate(([True], group[1:] != group[:-1])))
    most = int(np.diff(np.append(starts, n)).max())
    if most <= 16:  # the usual few keys per record: compare each row with the rows just before it
        for d in range(1, most):
            dup[d:] |= (group[d:] == group[:-d]) & (fp[d:] == fp[:-d])
    else:  # a long group: sort by (group, fingerprint, row), later rows of a run are repeats
        o = np.lexsort((np.arange(n), fp, group))
        g, f = group[o], fp[o]
        dup[o[1:]] = (g[1:] == g[:-1]) & (f[1:] == f[:-1])
    return dup


def record_starts(items: np.ndarray) -> np.ndarray:
    """Bool per row: the first row of a record (partition or offset differs from the row before)."""
    first = np.ones(len(items), dtype=bool)
    if len(items) > 1:
        first[1:] = (items["partition"][1:] != items["partition"][:-1]) | (items["offset"][1:] != items["offset"][:-1])
    return first


def group_by(items: np.ndarray, group: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(group value, its rows in their order) for each value of `group` (one int per row)."""
    if len(items) == 0:
        return
    order = np.argsort(group, kind="stable")
    g = group[order]
    cuts = np.flatnonzero(g[1:] != g[:-1]) + 1
    for lo, hi in zip(itertools.chain([0], cuts.tolist()), itertools.chain(cuts.tolist(), [len(g)]), strict=True):
        yield int(g[lo]), items[order[lo:hi]]


def by_window(items: np.ndarray, window_ms: int) -> Iterator[tuple[int, np.ndarray]]:
    return group_by(items, items["time"] // window_ms)


def histogram(items: np.ndarray, bucket_ms: int) -> Iterator[tuple[int, int, int]]:
    """(store time // bucket_ms, records, items) of each bucket the rows fall in."""
    if len(items) == 0:
        return
    b = items["time"] // bucket_ms
    firsts = record_starts(items).astype(np.int64)
    keys, inverse, n_items = np.unique(b, return_inverse=True, return_counts=True)
    n_records = np.bincount(inverse, weights=firsts, minlength=len(keys)).astype(np.int64)
    yield from zip(keys.tolist(), n_records.tolist(), n_items.tolist(), strict=True)


def range_index(times: np.ndarray, starts: Sequence[int]) -> np.ndarray:
    """Index of the file range (by its start time) holding each store time."""
    return np.searchsorted(np.asarray(starts, dtype=np.int64), times, side="right") - 1


def sort_dedup(items: np.ndarray) -> np.ndarray:
    """The rows sorted by (store time, partition, offset), a record's keys kept in order, with a repeated
    (partition, offset, key) dropped (object parts never overlap; a repeat would be a metadata bug)."""
    order = np.lexsort((items["offset"], items["partition"], items["time"]))  # stable: keys keep their order
    s = items[order]
    dup = repeated(np.cumsum(record_starts(s)), s["fp"])
    return s if not dup.any() else s[~dup]


def file_cuts(counts: np.ndarray, max_items: int) -> list[int]:
    """Where files start (record indexes) when records of `counts` keys each, in order, are cut into files
    of at most max_items items, balanced: as many files as the items need, each filled to about the same
    size; a record is never cut. Raises ValueError for a record with more keys than a file holds."""
    n = len(counts)
    if n == 0:
        return [0]
    if int(counts.max()) > max_items:
        i = int(np.argmax(counts > max_items))
        raise ValueError(f"record {i} has {int(counts[i])} keys, more than a file holds ({max_items})")
    cum = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=cum[1:])
    total = int(cum[-1])
    n_files = max(1, -(-total // max_items))
    target = -(-total // n_files)
    starts = [0]
    i = 0
    while True:  # one step per file: records are added while the file is below target and fits
        base = int(cum[i])
        j = min(int(np.searchsorted(cum, base + target, side="left")),
                int(np.searchsorted(cum, base + max_items, side="right")) - 1)
        j = max(j, i + 1)
        if j >= n:
            return starts
        starts.append(j)
        i = j


def native_items(items: np.ndarray) -> np.ndarray:
    """The rows as the native writer's items (queue = partition)."""
    out = np.zeros(len(items), dtype=ITEM_DTYPE)
    out["fp"], out["offset"], out["time"] = items["fp"], items["offset"], items["time"]
    out["queue"], out["size"] = items["partition"], items["size"]
    return out
