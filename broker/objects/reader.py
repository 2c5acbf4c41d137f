"""Reader of one S3Stream object: loads footer + index with ranged GETs, then reads only the blocks that
cover a requested (stream, offset range), coalescing adjacent blocks into one ranged GET.

Every malformed byte surfaces as `ObjectFormatError` naming the object key and the failed check.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import Protocol

from broker.errors import ObjectFormatError
from broker.objects.format import (
    FOOTER_SIZE,
    Footer,
    IndexEntry,
    StreamRecord,
    decode_block,
    decode_footer,
    decode_index,
)
from storage_tier.errors import BlobNotFound, InvalidRange

#: bytes read from the end of an object in the first GET: footer and, usually, the whole index
DEFAULT_TAIL_READ = 64 << 10


class RangeSource(Protocol):
    """What the reader needs of a store: a BlobStore, or anything with the same ranged get and size."""

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes: ...

    def size(self, key: str) -> int: ...


class ObjectReader:
    """`ObjectReader(store, key, size=None)`; pass `size` (known from the metadata) to skip a HEAD."""

    def __init__(self, store: RangeSource, key: str, size: int | None = None, *,
                 tail_read: int = DEFAULT_TAIL_READ) -> None:
        self.store = store
        self.key = key
        try:
            self.size = store.size(key) if size is None else size
        except BlobNotFound:
            raise ObjectFormatError(key, "missing object", "no such blob in the store") from None
        if self.size < FOOTER_SIZE:
            raise ObjectFormatError(key, "truncated footer",
                                    f"object is {self.size} bytes, a footer needs {FOOTER_SIZE}")
        tail_start = max(0, self.size - max(tail_read, FOOTER_SIZE))
        tail = self._get(tail_start, self.size)
        if len(tail) != self.size - tail_start:
            raise ObjectFormatError(key, "truncated object", f"expected {self.size} bytes, read ended early")
        self.footer: Footer = decode_footer(key, tail[-FOOTER_SIZE:], self.size)
        ipos, ilen = self.footer.index_position, self.footer.index_length
        if ipos >= tail_start:
            raw_index = tail[ipos - tail_start:ipos - tail_start + ilen]
        else:
            raw_index = self._get(ipos, ipos + ilen)
        self.index: list[IndexEntry] = decode_index(key, raw_index, self.footer)
        self._keys = [(e.stream_id, e.start_offset) for e in self.index]

    def _get(self, start: int, end: int) -> bytes:
        """A ranged read; a missing or shorter-than-committed object is damage named by key and check."""
        try:
            return self.store.get(self.key, start, end)
        except BlobNotFound:
            raise ObjectFormatError(self.key, "missing object", "no such blob in the store") from None
        except InvalidRange as exc:
            raise ObjectFormatError(self.key, "truncated object", f"expected {self.size} bytes: {exc}") from None

    def read_range(self, start: int, end: int) -> bytes:
        """Raw bytes [start, end) of the object (whole blocks, copied without decoding); short is damage."""
        data = self._get(start, end)
        if len(data) != end - start:
            raise ObjectFormatError(self.key, "truncated object", f"bytes [{start}, {end}) returned {len(data)} bytes")
        return data

    def entries_for(self, stream_id: int, start: int, end: int) -> list[IndexEntry]:
        """Index entries of `stream_id` overlapping [start, end), in offset order."""
        i = bisect.bisect_right(self._keys, (stream_id, start)) - 1
        i = max(i, 0)
        out = []
        for e in self.index[i:]:
            if e.stream_id > stream_id or (e.stream_id == stream_id and e.start_offset >= end):
                break
            if e.stream_id == stream_id and e.end_offset > start:
                out.append(e)
        return out

    def read_blocks(self, entries: list[IndexEntry]) -> Iterator[tuple[IndexEntry, list[StreamRecord]]]:
        """Fetch and decode these blocks, one ranged GET per run of adjacent blocks."""
        run: list[IndexEntry] = []
        for e in entries:
            if run and e.position != run[-1].position + run[-1].size:
                yield from self._read_run(run)
                run = []
            run.append(e)
        if run:
            yield from self._read_run(run)

    def _read_run(self, run: list[IndexEntry]) -> Iterator[tuple[IndexEntry, list[StreamRecord]]]:
        lo, hi = run[0].position, run[-1].position + run[-1].size
        data = self._get(lo, hi)
        if len(data) != hi - lo:
            raise ObjectFormatError(self.key, "truncated object", f"blocks [{lo}, {hi}) returned {len(data)} bytes")
        mv = memoryview(data)
        for e in run:
            yield e, decode_block(self.key, mv[e.position - lo:e.position - lo + e.size], e)

    def read(self, stream_id: int, start: int, end: int, max_bytes: int | None = None) -> list[StreamRecord]:
        """Records of `stream_id` overlapping [start, end); stops after the block that reaches `max_bytes`."""
        entries = self.entries_for(stream_id, start, end)
        if max_bytes is not None:
            kept, total = [], 0
            for e in entries:
                kept.append(e)
                total += e.size
                if total >= max_bytes:
                    break
            entries = kept
        out: list[StreamRecord] = []
        for _, records in self.read_blocks(entries):
            out.extend(r for r in records if r.last_offset > start and r.base_offset < end)
        return out

    def iter_all(self) -> Iterator[tuple[IndexEntry, list[StreamRecord]]]:
        """Every block of the object in index order."""
        yield from self.read_blocks(self.index)
