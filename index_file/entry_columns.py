"""A batch of index entries as columns: the topic and keys objects as lists, the four integer fields as
int64 numpy arrays, and the 64-bit fingerprints of the keys as a uint64 array.

A batch of the common shape (tuples of a str topic, four ints and one str key) is read by the compiled
index_file/_entry_columns.pyx, one pass in C; any other batch, or an install without the compiled module, takes
the Python path below, which gives the same columns and raises the errors.

The Python path's cost is touching each entry's Python objects (the tuple, its ints, its key string):
entries arrive in dispatch order, scattered over the heap, so every pass over them is a run of cache
misses. The columns are therefore built `SUB_ENTRIES` entries at a time, the passes of one part running
while its objects are still in the CPU cache, with C-level zip/map/np.fromiter (no Python bytecode per
entry, no per-entry iterator objects that would wake the garbage collector over the caller's heap).
"""

from __future__ import annotations

import ctypes
import itertools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import xxhash

SUB_ENTRIES = 512  # entries turned into columns at a time: their objects stay in cache across the passes

_xxh3 = xxhash.xxh3_64_intdigest
_FIRST = operator.itemgetter(0)


def _xxh3_address() -> int:
    """The address of XXH3_64bits in the xxhash package's own extension (it exports its C API), for the compiled
    reader; 0 when that build does not export it (fingerprints are then taken in Python)."""
    try:
        from xxhash import _xxhash  # type: ignore[attr-defined]

        return ctypes.cast(ctypes.CDLL(_xxhash.__file__).XXH3_64bits, ctypes.c_void_p).value or 0
    except (ImportError, OSError, AttributeError):
        return 0


_compiled: Any
try:
    from index_file import _entry_columns as _compiled  # built by pip install (setup.py); optional
    _compiled.use_hash(_xxh3_address())
except ImportError:
    _compiled = None


@dataclass(frozen=True)
class EntryColumns:
    """topic, queue_id, offset, size, store_time_ms and keys of consecutive entries; with `fps`, the
    fingerprints of their keys in order and `counts`, the number of keys of each entry (None: one each)."""

    topics: list[object]
    queue: np.ndarray
    offset: np.ndarray
    size: np.ndarray
    time: np.ndarray
    keys: list[object]
    fps: np.ndarray | None = None
    counts: list[int] | None = None

    def __len__(self) -> int:
        return len(self.topics)

    def slice(self, start: int, stop: int | None = None) -> EntryColumns:
        fps = self.fps if self.counts is None or self.fps is None else None  # keyed by item, not entry
        return EntryColumns(self.topics[start:stop], self.queue[start:stop], self.offset[start:stop],
                            self.size[start:stop], self.time[start:stop], self.keys[start:stop],
                            None if fps is None else fps[start:stop])

    @classmethod
    def join(cls, parts: Sequence[EntryColumns]) -> EntryColumns:
        """The columns of batches one after the other."""
        if len(parts) == 1:
            return parts[0]
        simple = all(p.fps is not None and p.counts is None for p in parts)
        return cls(list(itertools.chain.from_iterable(p.topics for p in parts)),
                   np.concatenate([p.queue for p in parts]), np.concatenate([p.offset for p in parts]),
                   np.concatenate([p.size for p in parts]), np.concatenate([p.time for p in parts]),
                   list(itertools.chain.from_iterable(p.keys for p in parts)),
                   np.concatenate([p.fps for p in parts]) if simple else None)  # type: ignore[misc]


def entry_columns(entries: Sequence[Sequence[object]], with_fingerprints: bool = False,
                  strict: bool = False) -> EntryColumns:
    """The columns of 6-field entries (tuples or IndexEntry), with the keys' fingerprints when asked.
    Raises ValueError when an entry does not have 6 fields, TypeError when one is not a sequence or an
    integer field is not a number (`strict`: not an int; a float or a bool is refused rather than
    converted), OverflowError when it does not fit 64 bits."""
    n = len(entries)
    ints = [np.empty(n, dtype=np.int64) for _ in range(4)]
    fps = np.empty(n, dtype=np.uint64) if with_fingerprints else None
    if _compiled is not None and type(entries) is list:
        read = _compiled.columns(entries, *ints, fps)
        if read is not None:
            topics, keys, one_key = read
            counts = None
            if with_fingerprints and not one_key:
                fps, counts = fingerprints(topics, keys)
            return EntryColumns(topics, *ints, keys, fps, counts)
    topics = []
    keys = []
    fromiter = np.fromiter
    for a in range(0, n, SUB_ENTRIES):
        part = entries[a:a + SUB_ENTRIES]
        m = len(part)
        # one transposing pass over the part's entries (zip(*part)), then the columns are tuples of
        # pointers, read in order: a third of the time of one itemgetter pass per field
        try:  # (strict: every entry as long as the first; six names: six fields)
            t, q, off, size, tm, k = zip(*part, strict=True)
        except ValueError:
            raise ValueError("an entry does not have 6 fields") from None
        if strict and set(map(type, itertools.chain(q, off, size, tm))) != {int}:
            raise TypeError("an integer field is not an int")
        for col, values in zip(ints, (q, off, size, tm), strict=True):
            col[a:a + m] = fromiter(values, dtype=np.int64, count=m)
        topics += t
        keys += k
        if fps is not None:
            one = _one_key_fingerprints(t, k)
            if one is None:  # several keys somewhere: the general loop over the whole batch below
                fps = None
            else:
                fps[a:a + m] = one
    counts = None
    if with_fingerprints and fps is None:
        fps, counts = fingerprints(topics, keys)
    return EntryColumns(topics, *ints, keys, fps, counts)


def _one_key_fingerprints(topics: Sequence[object], keys: Sequence[object]) -> np.ndarray | None:
    """The fingerprints when every entry has one string key (a string or a one-string list), else None."""
    one: Sequence[object]
    key_types = set(map(type, keys))
    if key_types == {str}:
        one = keys
    elif key_types <= {list, tuple} and set(map(len, keys)) == {1}:  # type: ignore[arg-type]
        one = list(map(_FIRST, keys))
        if set(map(type, one)) != {str}:
            return None
    else:
        return None
    # topics are few: "topic#" built once per topic (as the general loop's f-string would make it)
    prefix = {t: f"{t}#" for t in set(topics)}
    texts = map(operator.add, map(prefix.__getitem__, topics), one)  # type: ignore[arg-type]
    return np.fromiter(map(_xxh3, map(str.encode, texts)), dtype=np.uint64, count=len(keys))


def fingerprints(topics: Sequence[object], keys: Sequence[object]) -> tuple[np.ndarray, list[int] | None]:
    """The fingerprints (xxh3-64 of `topic#key`, UTF-8) of the entries' keys in order, and the number of
    keys of each entry (None: one each). One key per entry (a string or a one-string list) goes through
    C-level map chains; anything else takes the general loop, where a key listed twice is stored once."""
    if (one := _one_key_fingerprints(topics, keys)) is not None:
        return one, None
    xxh = _xxh3
    fps: list[int] = []
    counts: list[int] = []
    for topic, ks in zip(topics, keys, strict=True):
        seen: list[int] = []
        for k in ([ks] if type(ks) is str else ks):  # type: ignore[attr-defined]
            f = xxh(f"{topic}#{k}".encode())
            if f not in seen:  # a key listed twice is stored once
                seen.append(f)
        fps.extend(seen)
        counts.append(len(seen))
    return np.array(fps, dtype=np.uint64), None if set(counts) == {1} else counts  # one key each, in mixed shapes
