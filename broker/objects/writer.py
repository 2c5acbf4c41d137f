"""Streaming writer of one S3Stream object (stream object or stream set object) to a BlobStore.

Records are appended in (streamId, baseOffset) order; a data block holds one stream's contiguous records
and closes at about `block_size` bytes of records, on a change of stream, or on an offset gap. Closed
blocks are buffered and shipped as multipart parts of `part_size` bytes once two parts' worth are
pending, so memory stays bounded (< 2 parts) for big objects and the part count depends on the object
size only; an object below 2 parts is written with a single PUT. With `eager=True` (compaction, whose
memory budget counts every buffered byte) a part ships as soon as one part's worth is pending, so at
most one part (plus a block) is ever buffered; the last part may then be small. `close()` appends the index block
and the footer and returns an `ObjectInfo`; `abort()` (or an exception inside a `with`) leaves nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.objects.format import (
    BLOCK_HEADER_SIZE,
    DEFAULT_BLOCK_SIZE,
    FOOTER_SIZE,
    Footer,
    IndexEntry,
    StreamRecord,
    encode_block_header,
    encode_record_header,
)
from storage_tier import BlobStore, MultipartWriter

#: pending bytes that trigger a multipart part (S3 needs >= 5 MiB per part except the last)
DEFAULT_PART_SIZE = 8 << 20


@dataclass(frozen=True, slots=True)
class StreamRange:
    """[start_offset, end_offset) of one stream inside an object."""

    stream_id: int
    start_offset: int
    end_offset: int


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    index: list[IndexEntry]
    ranges: list[StreamRange] = field(default_factory=list)


class ObjectWriter:
    def __init__(self, store: BlobStore, key: str, *, block_size: int = DEFAULT_BLOCK_SIZE,
                 part_size: int = DEFAULT_PART_SIZE, eager: bool = False) -> None:
        if block_size <= 0 or part_size <= 0:
            raise ValueError("block_size and part_size must be positive")
        self.store = store
        self.key = key
        self.block_size = block_size
        self.part_size = part_size
        self.eager = eager
        # Closed blocks not yet shipped and the open block, as the pieces they are made of (record headers and
        # the records' payloads as the caller holds them): the bytes are copied once, into the part they ship in.
        self._pending: list[bytes | memoryview] = []
        self._pending_len = 0
        self._shipped = 0  # bytes already written as parts
        self._mpu: MultipartWriter | None = None
        self._index: list[IndexEntry] = []
        self._ranges: list[StreamRange] = []
        # the open block
        self._block: list[bytes] = []
        self._block_len = 0
        self._block_records = 0
        self._block_stream = -1
        self._block_start = 0
        self._block_end = 0
        self._last: tuple[int, int] | None = None  # (stream id, end offset) of the last record
        self._closed = False

    @property
    def position(self) -> int:
        """Bytes of closed blocks so far (the position of the next block)."""
        return self._shipped + self._pending_len

    @property
    def size_estimate(self) -> int:
        return self.position + self._block_len + BLOCK_HEADER_SIZE

    def write(self, rec: StreamRecord) -> None:
        if self._closed:
            raise ValueError(f"object writer for {self.key!r} is closed")
        if self._last is not None:
            sid, end = self._last
            if rec.stream_id < sid or (rec.stream_id == sid and rec.base_offset < end):
                raise ValueError(f"records must come in (streamId, offset) order: {rec.stream_id}:{rec.base_offset} "
                                 f"after {sid}:[..., {end})")
        contiguous = self._block_records > 0 and rec.stream_id == self._block_stream \
            and rec.base_offset == self._block_end
        if self._block_records and not contiguous:
            self._close_block()
        if not self._block_records:
            self._block_stream = rec.stream_id
            self._block_start = rec.base_offset
        header = encode_record_header(rec)
        self._block.append(header)
        self._block.append(rec.payload)
        self._block_len += len(header) + len(rec.payload)
        self._block_records += 1
        self._block_end = rec.last_offset
        self._last = (rec.stream_id, rec.last_offset)
        # the stream ranges of the object: extend the last one when contiguous
        r = self._ranges[-1] if self._ranges else None
        if r is not None and r.stream_id == rec.stream_id and r.end_offset == rec.base_offset:
            self._ranges[-1] = StreamRange(r.stream_id, r.start_offset, rec.last_offset)
        else:
            self._ranges.append(StreamRange(rec.stream_id, rec.base_offset, rec.last_offset))
        if self._block_len >= self.block_size:
            self._close_block()

    def _close_block(self) -> None:
        if not self._block_records:
            return
        size = BLOCK_HEADER_SIZE + self._block_len
        self._index.append(IndexEntry(self._block_stream, self._block_start, self._block_end,
                                      self._block_records, self.position, size))
        self._pending.append(encode_block_header(self._block_records, self._block_len))
        self._pending += self._block
        self._pending_len += size
        self._block = []
        self._block_len = 0
        self._block_records = 0
        if self._pending_len >= (1 if self.eager else 2) * self.part_size:
            self._ship()

    def _take(self, n: int) -> bytes:
        """The first `n` pending bytes as one bytes object (the one copy), a piece split at the boundary."""
        out: list[bytes | memoryview] = []
        got = 0
        i = 0
        while got < n:
            piece = self._pending[i]
            if got + len(piece) > n:
                cut = n - got
                out.append(memoryview(piece)[:cut])
                self._pending[i] = memoryview(piece)[cut:]
                got = n
                break
            out.append(piece)
            got += len(piece)
            i += 1
        del self._pending[:i]
        self._pending_len -= n
        return b"".join(out)

    def _ship(self, final: bool = False) -> None:
        """Ship pending bytes as parts of exactly `part_size`, keeping at least one part's worth back until
        the end so the last part is never a small tail: an object of N bytes takes max(1, N // part_size)
        parts whatever its block layout (many small partitions or one big one cost the same PUTs)."""
        if self._mpu is None:
            self._mpu = self.store.multipart(self.key)
        if self.eager:  # everything pending is one part, the pieces dropped at once
            data = self._take(self._pending_len)
            self._shipped += len(data)
            self._mpu.write_part(data)
            return
        while self._pending_len >= 2 * self.part_size or (final and self._pending_len):
            n = self._pending_len if self._pending_len < 2 * self.part_size else self.part_size
            self._mpu.write_part(self._take(n))
            self._shipped += n

    def close(self) -> ObjectInfo:
        """Write the index block and footer and make the object visible."""
        if self._closed:
            raise ValueError(f"object writer for {self.key!r} is closed")
        try:
            self._close_block()
            index_pos = self.position
            index = b"".join(e.encode() for e in self._index)
            self._pending.append(index)
            self._pending.append(Footer(index_pos, len(index)).encode())
            self._pending_len += len(index) + FOOTER_SIZE
            size = self._shipped + self._pending_len
            if self._mpu is None:
                self.store.put(self.key, self._take(self._pending_len))
            else:
                self._ship(final=True)
                self._mpu.complete()
            self._closed = True
            return ObjectInfo(self.key, size, list(self._index), list(self._ranges))
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        self._closed = True
        self._pending = []
        self._pending_len = 0
        if self._mpu is not None:
            self._mpu.abort()

    def __enter__(self) -> ObjectWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self.abort()


def write_object(store: BlobStore, key: str, records: list[StreamRecord], **kwargs: int) -> ObjectInfo:
    """Write a whole object from records already in (streamId, offset) order."""
    w = ObjectWriter(store, key, **kwargs)
    try:
        for r in records:
            w.write(r)
    except BaseException:
        w.abort()
        raise
    return w.close()
