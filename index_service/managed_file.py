"""ManagedFile: one index file in the service's map, whatever its current form.

It holds the file's state, the object that answers queries for that state (a NativeIndexWriter
while WRITING/SEALED, a local CompactedIndexReader when COMPACTED, a CompactedIndexReader over
the store when UPLOADED, a RocketMQIndexReader when IMPORTED), and a read-write lock: queries hold
the read side while they use the form, a transition takes the write side only to swap the form and
close the old one. So a file being compacted or uploaded answers from its old form until the swap
and from its new form after it, never from a closed one.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from index_file import IndexHit
from index_service.locks import RWLock
from index_service.model import FileInfo, FileState
from index_service.ranges import Ranges

_I64_MAX = (1 << 63) - 1


class Queryable(Protocol):
    def query(self, topic: str, key: str, max_count: int = 64, begin_ms: int = 0,
              end_ms: int | None = None) -> list[IndexHit]: ...

    def close(self) -> None: ...


class ManagedFile:
    def __init__(self, stem: str, begin_ms: int, state: FileState, form: Any, location: str, *,
                 exact: bool = True, sort_tag: str = "") -> None:
        self.stem = stem
        self.begin_ms = begin_ms
        self.state = state
        self.form: Any = form
        self.location = location
        self.exact = exact
        self.sort_tag = sort_tag  # tie-breaker in the map (imported files may share a begin time)
        self.lock = RWLock()
        self.items = 0
        self.min_ms: int | None = None
        self.max_ms: int | None = None
        self.size_bytes = 0
        self.remote_key: str | None = None
        #: (topic, queue) -> (lowest, highest) offset held; None: unknown (see ranges.py)
        self.ranges: Ranges | None = None
        #: merge tier (0: a file as written; n: merged into the n-th tier, see merging.py)
        self.tier = 0
        #: a merged file's inputs (stem, store key) not yet deleted from the store, and when the merge committed
        self.replaces: list[tuple[str, str]] = []
        self.committed_ms = 0
        #: a build's file: what the build indexed whole (build_covers.Cover); None until read from its manifest
        self.covers: list[Any] | None = None
        # retry bookkeeping of the background thread
        self.failures = 0
        self.next_attempt = 0.0
        self.refresh()

    @property
    def map_key(self) -> tuple[int, str]:
        return (self.begin_ms, self.sort_tag)

    def refresh(self) -> None:
        """Re-read counts and time bounds from the current form (live for a WRITING file)."""
        f = self.form
        if f is None:
            return
        self.items = int(getattr(f, "item_count", 0))
        if hasattr(f, "min_time_ms"):
            self.min_ms, self.max_ms = f.min_time_ms, f.max_time_ms
        elif hasattr(f, "end_ms"):  # RocketMQ: second-resolution diffs around begin
            self.min_ms = f.begin_ms - 1000 if self.items else None
            self.max_ms = f.end_ms + 999 if self.items else None

    def time_bounds(self) -> tuple[int, int] | None:
        """[oldest, newest] store time in the file (None when empty); live for the WRITING file."""
        if self.state in (FileState.WRITING, FileState.SEALED) and self.form is not None:
            w = self.form
            if w.item_count == 0:
                return None
            return int(w.min_time_ms), int(w.max_time_ms)
        if self.min_ms is None or self.max_ms is None:
            return None
        return self.min_ms, self.max_ms

    def query(self, topic: str, key: str, max_count: int, lo: int, hi: int) -> list[IndexHit]:
        with self.lock.read():
            form = self.form
            if form is None or self.state is FileState.EXPIRED:
                return []
            return form.query(topic, key, max_count, lo, hi)

    def swap(self, state: FileState, form: Any, location: str) -> None:
        """Switch to a new form atomically for queries; the old form is closed after the swap."""
        with self.lock.write():
            old = self.form
            self.form = form
            self.state = state
            self.location = location
            self.refresh()
        if old is not None and old is not form:
            old.close()

    def retire(self) -> None:
        with self.lock.write():
            old = self.form
            self.form = None
            self.state = FileState.EXPIRED
        if old is not None:
            old.close()

    def backoff(self, initial_s: float, max_s: float) -> float:
        self.failures += 1
        delay = min(max_s, initial_s * (2 ** (self.failures - 1)))
        self.next_attempt = time.monotonic() + delay
        return delay

    def succeeded(self) -> None:
        self.failures = 0
        self.next_attempt = 0.0

    def info(self) -> FileInfo:
        if self.state in (FileState.WRITING, FileState.SEALED) and self.form is not None:
            self.refresh()
        return FileInfo(self.stem, self.state, self.begin_ms, self.max_ms, self.items, self.location,
                        self.min_ms, self.size_bytes, self.exact)

    def __repr__(self) -> str:
        return f"<ManagedFile {self.stem} {self.state.value} items={self.items}>"
