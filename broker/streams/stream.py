"""Stream: one stream opened by this node at an epoch (AutoMQ's S3Stream), knowing nothing of Kafka.

    s = storage.open_streams([(sid, epoch)])[sid]      # see broker/streams/storage.py
    fut = s.append(payload, count, base_offset)          # resolves once the WAL has it on disk
    for rec in s.fetch(start, end): ...                  # cache -> block cache -> objects
    s.trim(new_start); storage.close_streams([s])

Offsets are stream offsets: a record of `count` items at `base_offset` ends at `base_offset + count`.
`next_offset` is the next offset an append must start at; `confirmed_end` is the end of what the WAL has
made durable (acknowledged). The caller orders its appends (it holds a lock of its own around choosing
the base offset and calling `append`), so the stream checks continuity rather than assigning offsets.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from broker.errors import Fenced
from broker.objects.format import StreamRecord

if TYPE_CHECKING:
    from broker.streams.storage import StreamStorage


class Stream:
    def __init__(self, storage: StreamStorage, stream_id: int, epoch: int, end_offset: int) -> None:
        self.storage = storage
        self.stream_id = stream_id
        self.epoch = epoch
        self.next_offset = end_offset  # where the next append starts
        self.confirmed_end = end_offset  # offsets below are durable (cache or objects)
        self._fenced = False  # another owner holds it now: nothing more is appended or committed
        self.closed = False
        self.appended_offsets = 0  # offsets and payload bytes queued since the stream opened here (throughput)
        self.appended_bytes = 0
        # re-entrant: a WAL append that fails at once runs its completion (rollback) on the appending thread
        self._lock = threading.RLock()

    @property
    def start_offset(self) -> int:
        return self.storage.meta.get_stream(self.stream_id, refresh=False).start_offset

    @property
    def committed_end(self) -> int:
        """The end of what is committed to objects (the controller metadata's end offset)."""
        return self.storage.meta.get_stream(self.stream_id, refresh=False).end_offset

    @property
    def fenced(self) -> bool:
        """Another owner holds the stream now: nothing more is appended or committed."""
        return self._fenced

    @fenced.setter
    def fenced(self, value: bool) -> None:
        with self._lock:  # never between a check of `fenced` and the appends of a holder of `append_lock`
            self._fenced = value

    @property
    def append_lock(self) -> threading.RLock:
        """The lock `append` holds, also taken to fence the stream: a caller that holds the locks of several
        streams across its check of `fenced` and its appends to them (an HTTP produce over several partitions)
        queues all of its records or none (a fence waits until they are queued)."""
        return self._lock

    def append(self, payload: bytes, count: int, base_offset: int,
               on_durable: Callable[[StreamRecord], None] | None = None, append_ms: int | None = None
               ) -> Future[Any]:
        """Queue `payload` (`count` offsets from `base_offset` = next_offset) for the WAL. The future resolves
        after the fsync, once the record is in the log cache and `confirmed_end` covers it; `on_durable`
        runs just before that, in WAL order. `append_ms`, the append time, is stored with the record (WAL and
        objects): every later reader of the record indexes it at that time."""
        with self._lock:
            if self.closed or self.fenced:
                raise Fenced(f"stream {self.stream_id} is {'fenced' if self.fenced else 'closed'} on this node")
            if base_offset != self.next_offset:
                raise ValueError(f"stream {self.stream_id}: append at {base_offset}, expected {self.next_offset}")
            rec = StreamRecord(self.stream_id, self.epoch, base_offset, count, payload, append_ms)
            self.next_offset = rec.last_offset
            try:
                queued = self.storage.append(self, rec, on_durable)
                self.appended_offsets += count
                self.appended_bytes += len(payload)
                return queued
            except BaseException:
                self.next_offset = base_offset  # refused before it was queued: its offsets are free again
                raise

    def rollback_unacknowledged(self) -> None:
        """A WAL append failed, and with it every append queued behind it: the next append starts at the end
        of what was acknowledged, so the offsets of refused records are used again, never skipped."""
        with self._lock:
            self.next_offset = self.confirmed_end

    def fetch(self, start: int, end: int, max_bytes: int = 1 << 20) -> Iterator[StreamRecord]:
        """Records covering [start, end) in order."""
        return self.storage.read(self.stream_id, start, end, max_bytes)

    def trim(self, new_start: int) -> None:
        """Raise the stream's start offset (retention); objects wholly below it are cleaned up later."""
        self.storage.meta.trim_stream(self.stream_id, self.epoch, new_start)

    def __repr__(self) -> str:
        return f"Stream({self.stream_id}, epoch={self.epoch}, next={self.next_offset})"
