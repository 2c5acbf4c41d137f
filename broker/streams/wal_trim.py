"""Which prefix of the WAL is no longer needed: every record in it is committed to object storage.

Appends register a slot in WAL order (the caller holds the lock that orders its `Wal.append_async`
calls); the slot learns its WAL position when the append completes. After an upload commits, the
streams' committed ends advance and `trim_point()` pops the leading slots whose records are committed
(or were appended for a stream this node gave up, see `forget_stream`), returning the WAL offset to trim to.

Giving a stream up releases the slots it has then, not the stream id: when the stream comes back to this node
(a reassignment, a rebalance, a failover back), its new appends hold the trim point again until committed.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass


@dataclass(eq=False)  # a slot is one append: discard() removes that one
class WalSlot:
    stream_id: int
    last_offset: int  # the stream offset after the record (exclusive end)
    wal_next: int | None = None  # WAL offset after the record, once durable
    released: bool = False  # appended for a stream this node gave up: it does not hold the trim point back
    wal_start: int | None = None  # WAL offset of the record's header, once durable


class WalTrimTracker:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: deque[WalSlot] = deque()
        self._committed: dict[int, int] = {}

    def add(self, slot: WalSlot) -> None:
        with self._lock:
            self._slots.append(slot)

    def discard(self, slot: WalSlot) -> None:
        """A failed append: its slot never gets a WAL position and must not hold the trim point back."""
        with self._lock:
            try:
                self._slots.remove(slot)
            except ValueError:
                pass

    def committed(self, ends: dict[int, int]) -> None:
        """Streams' ends now in object storage."""
        with self._lock:
            for sid, end in ends.items():
                if end > self._committed.get(sid, -1):
                    self._committed[sid] = end

    def forget_stream(self, stream_id: int) -> None:
        """This node no longer owns the stream: the WAL records it appended for it so far must not hold the trim
        point back. Records appended after the stream is opened here again do, until they are committed."""
        with self._lock:
            for s in self._slots:
                if s.stream_id == stream_id:
                    s.released = True

    def ranges_of(self, stream_id: int, above: int) -> list[tuple[int, int]]:
        """WAL ranges [start, next) of the durable records of a stream held here that end after `above`, in order
        (what a move lends to the next owner of the stream)."""
        with self._lock:
            return [(s.wal_start, s.wal_next) for s in self._slots
                    if s.stream_id == stream_id and not s.released and s.last_offset > above
                    and s.wal_start is not None and s.wal_next is not None]

    def trim_point(self) -> int | None:
        """The WAL offset below which every record is committed (None: nothing new to trim)."""
        point = None
        with self._lock:
            while self._slots:
                s = self._slots[0]
                if s.wal_next is None:
                    break
                if not s.released and self._committed.get(s.stream_id, -1) < s.last_offset:
                    break
                point = s.wal_next
                self._slots.popleft()
        return point

    def __len__(self) -> int:
        return len(self._slots)
