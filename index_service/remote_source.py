"""CachedSummarySource: an uploaded compacted file whose header and summary are kept locally.

The manifest of an uploaded file carries the file's first 64 bytes and its summary + footer, so
opening the remote reader after a restart costs no request at all, and every query is exactly one
ranged GET of the block that can hold the key (zero when the block fence rules it out).
"""

from __future__ import annotations

from index_file.errors import FormatError
from index_service.lookup_stats import count_get


class CachedSummarySource:
    """A ByteSource over BlobStore object `key`: reads inside the cached head or tail are served from
    memory, anything else is one ranged GET (counted by store.meter)."""

    def __init__(self, store: object, key: str, size: int, head: bytes, tail_offset: int, tail: bytes) -> None:
        self.store = store
        self.key = key
        self._size = size
        self._head = head
        self._tail_offset = tail_offset
        self._tail = tail
        self.name = f"{getattr(store, 'url', store)}:{key}"

    def read(self, start: int, end: int) -> bytes:
        if start < 0 or end < start or end > self._size:
            raise FormatError(self.name, "range", f"bad range [{start}, {end}) of a {self._size}-byte file")
        if end <= len(self._head):
            return self._head[start:end]
        if start >= self._tail_offset:
            return self._tail[start - self._tail_offset:end - self._tail_offset]
        if end == start:
            return b""
        count_get()
        data = self.store.get(self.key, start, end)  # type: ignore[attr-defined]
        if len(data) != end - start:
            raise FormatError(self.name, "truncated", f"wanted {end - start} bytes at {start}, got {len(data)}")
        return data

    def size(self) -> int:
        return self._size

    def close(self) -> None:
        pass
