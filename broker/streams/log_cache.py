"""Log cache: the records of each stream acknowledged by the WAL, kept in memory until uploaded.

Records are appended per stream in offset order. `snapshot()` hands the uploader every record not yet
uploaded, grouped by stream; `mark_uploaded()` drops what a committed upload covered. Reads of recent
data (`read`) are answered from here without touching object storage.
"""

from __future__ import annotations

import bisect
import threading

from broker.objects.format import StreamRecord


class LogCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: dict[int, list[StreamRecord]] = {}
        self._bytes = 0

    @property
    def size(self) -> int:
        """Payload bytes held."""
        return self._bytes

    def append(self, rec: StreamRecord) -> None:
        with self._lock:
            recs = self._streams.setdefault(rec.stream_id, [])
            if recs and rec.base_offset != recs[-1].last_offset:
                raise ValueError(f"stream {rec.stream_id}: record at {rec.base_offset} does not continue the cache "
                                 f"at {recs[-1].last_offset}")
            recs.append(rec)
            self._bytes += len(rec.payload)

    def prepend(self, stream_id: int, recs: list[StreamRecord]) -> None:
        """Put `recs` (contiguous, in offset order) before the stream's cached records: the range of a moved
        stream that was acknowledged by its previous owner, read after this node appended behind it."""
        if not recs:
            return
        with self._lock:
            held = self._streams.setdefault(stream_id, [])
            for a, b in zip(recs, recs[1:], strict=False):
                if b.base_offset != a.last_offset:
                    raise ValueError(f"stream {stream_id}: records at {a.base_offset} and {b.base_offset} are "
                                     f"not contiguous")
            if held and recs[-1].last_offset != held[0].base_offset:
                raise ValueError(f"stream {stream_id}: records ending at {recs[-1].last_offset} do not reach the "
                                 f"cache at {held[0].base_offset}")
            held[:0] = recs
            self._bytes += sum(len(r.payload) for r in recs)

    def stream_bytes(self, stream_id: int, above: int = -1) -> int:
        """Payload bytes held for one stream, of its records ending after offset `above`."""
        with self._lock:
            return sum(len(r.payload) for r in self._streams.get(stream_id, ()) if r.last_offset > above)

    def end_offset(self, stream_id: int) -> int | None:
        with self._lock:
            recs = self._streams.get(stream_id)
            return recs[-1].last_offset if recs else None

    def snapshot(self) -> dict[int, list[StreamRecord]]:
        """Every cached record by stream (copies of the lists, in stream id order)."""
        with self._lock:
            return {sid: list(recs) for sid, recs in sorted(self._streams.items()) if recs}

    def mark_uploaded(self, upto: dict[int, int]) -> None:
        """Drop the records of each stream below its offset in `upto` (the uploaded end)."""
        with self._lock:
            for sid, end in upto.items():
                recs = self._streams.get(sid, [])
                keep = [r for r in recs if r.last_offset > end]
                self._bytes -= sum(len(r.payload) for r in recs) - sum(len(r.payload) for r in keep)
                if keep:
                    self._streams[sid] = keep
                else:
                    self._streams.pop(sid, None)

    def read(self, stream_id: int, start: int, end: int) -> list[StreamRecord] | None:
        """Records overlapping [start, end) when the cache holds `start`; None when it does not."""
        with self._lock:
            recs = self._streams.get(stream_id)
            if not recs or start < recs[0].base_offset or start >= recs[-1].last_offset:
                return None
            i = bisect.bisect_right(recs, start, key=lambda r: r.base_offset) - 1
            out = []
            for r in recs[i:]:
                if r.base_offset >= end:
                    break
                out.append(r)
            return out
