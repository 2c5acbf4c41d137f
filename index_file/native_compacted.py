"""The native compacted index file: items sorted by fingerprint in ~64 KiB blocks, a block fence
in a summary at the end, so a key costs one ranged read once the summary is in memory.

Layout (little-endian; byte by byte in docs/FORMAT.md):
  header   64 B  @0      magic "MQXC", version, item size 32, items per block, block count,
                         item count, begin/min/max time ms, summary offset, CRC32C
  blocks   @64           block b at 64 + b*items_per_block*32 holds n_b items column-wise:
                         fp u64[n_b], store_time_ms i64[n_b], offset i64[n_b], queue_id i32[n_b],
                         size i32[n_b]; items sorted by (fp asc, time desc, offset desc, queue desc)
  summary  12 B/block    fence: first fp of each block u64[B], then CRC32C of each block u32[B]
  footer   32 B          summary length, item count, summary CRC32C, magic "MQXE", CRC32C

Every byte is under a CRC32C: header, each block, summary, footer. A reader loads header and
summary + footer once (two reads); a query reads the contiguous blocks whose fence range can hold
the key's fingerprint (almost always one block) in one read and checks those blocks' CRC32C before
using them, so corrupt bytes are reported, never served.
"""

from __future__ import annotations

import bisect
import os
import struct
import sys
from dataclasses import dataclass

import crc32c
import numpy as np
import xxhash

from index_file.errors import FormatError, NewerFormat
from index_file.model import IndexHit, check_range, finish_hits
from index_file.source import ByteSource, open_source

MAGIC = b"MQXC"
FOOTER_MAGIC = b"MQXE"
VERSION = 1
HEADER_SIZE = 64
FOOTER_SIZE = 32
ITEM_SIZE = 32
DEFAULT_ITEMS_PER_BLOCK = 2048  # 2048 * 32 B = 64 KiB blocks
SUMMARY_BYTES_PER_BLOCK = 12

_HEADER = struct.Struct("<4sHHIIQqqqQII")
_FOOTER = struct.Struct("<QQI4sII")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_I32 = struct.Struct("<i")
_LITTLE = sys.byteorder == "little"  # memoryview.cast("Q") reads the machine's byte order
assert _HEADER.size == HEADER_SIZE and _FOOTER.size == FOOTER_SIZE

_xxh3 = xxhash.xxh3_64_intdigest
_I64_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class CompactedHeader:
    items_per_block: int
    block_count: int
    item_count: int
    begin_ms: int
    min_ms: int
    max_ms: int

    @property
    def summary_offset(self) -> int:
        return HEADER_SIZE + self.item_count * ITEM_SIZE

    @property
    def total_size(self) -> int:
        return self.summary_offset + self.block_count * SUMMARY_BYTES_PER_BLOCK + FOOTER_SIZE

    def block_range(self, b: int) -> tuple[int, int]:
        """[start, end) byte range of block b."""
        start = HEADER_SIZE + b * self.items_per_block * ITEM_SIZE
        n = min(self.items_per_block, self.item_count - b * self.items_per_block)
        return start, start + n * ITEM_SIZE

    def pack(self) -> bytes:
        body = _HEADER.pack(MAGIC, VERSION, ITEM_SIZE, self.items_per_block, self.block_count, self.item_count,
                            self.begin_ms, self.min_ms, self.max_ms, self.summary_offset, 0, 0)
        return body[:60] + _U32.pack(crc32c.crc32c(body[:60]))

    @classmethod
    def parse(cls, name: str, data: bytes | memoryview) -> CompactedHeader:
        if len(data) < HEADER_SIZE:
            raise FormatError(name, "truncated", f"{len(data)} bytes is shorter than the {HEADER_SIZE}-byte header")
        (magic, version, isize, ipb, blocks, count, begin, mn, mx, summary_off, _r,
         crc) = _HEADER.unpack_from(data, 0)
        if magic != MAGIC:
            raise FormatError(name, "magic", f"{bytes(magic)!r} is not the native compacted magic {MAGIC!r}")
        if crc32c.crc32c(bytes(data[:60])) != crc:
            raise FormatError(name, "header crc32c", "the header's checksum does not match its bytes")
        if version > VERSION:
            raise NewerFormat(name, version, VERSION)
        if version != VERSION or isize != ITEM_SIZE:
            raise FormatError(name, "version", f"version {version}, item size {isize} not supported")
        h = cls(ipb, blocks, count, begin, mn, mx)
        if ipb <= 0 or blocks != (count + ipb - 1) // ipb or summary_off != h.summary_offset:
            raise FormatError(name, "geometry", f"{count} items, {ipb} per block, {blocks} blocks, "
                                                f"summary at {summary_off}")
        return h


def pack_footer(h: CompactedHeader, summary: bytes) -> bytes:
    body = _FOOTER.pack(len(summary), h.item_count, crc32c.crc32c(summary), FOOTER_MAGIC, 0, 0)
    return body[:28] + _U32.pack(crc32c.crc32c(body[:28]))


def block_columns(block: bytes | memoryview, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                              np.ndarray]:
    """fp, time, offset, queue, size columns of a block of n items (zero-copy views)."""
    return (np.frombuffer(block, dtype="<u8", count=n, offset=0),
            np.frombuffer(block, dtype="<i8", count=n, offset=8 * n),
            np.frombuffer(block, dtype="<i8", count=n, offset=16 * n),
            np.frombuffer(block, dtype="<i4", count=n, offset=24 * n),
            np.frombuffer(block, dtype="<i4", count=n, offset=28 * n))


class CompactedIndexReader:
    """A native compacted file on any ByteSource: a local path (mmap) or BlobSource(store, key).

    Loading reads the header and the summary + footer once (the summary is ~6 KB per million
    items). Each query then reads one contiguous byte range. `verify_blocks=True` checks every
    block's CRC32C at open (cheap on a local file, so queries then skip it); otherwise each query
    checks the blocks it read.
    """

    def __init__(self, source: ByteSource | str | os.PathLike[str], verify_blocks: bool | None = None) -> None:
        local = isinstance(source, (str, os.PathLike))
        self.source = open_source(source)
        self.name = self.source.name
        try:
            self._load(local if verify_blocks is None else verify_blocks, check_size=local)
        except BaseException:
            self.source.close()
            raise

    def _load(self, verify_all: bool, check_size: bool) -> None:
        name = self.name
        h = CompactedHeader.parse(name, self.source.read(0, HEADER_SIZE))
        self.header = h
        if check_size and self.source.size() != h.total_size:
            raise FormatError(name, "file size", f"{self.source.size()} bytes, the header says {h.total_size}")
        tail = bytes(self.source.read(h.summary_offset, h.total_size))
        summary, footer = tail[:-FOOTER_SIZE], tail[-FOOTER_SIZE:]
        slen, count, scrc, fmagic, _r, fcrc = _FOOTER.unpack_from(footer, 0)
        if fmagic != FOOTER_MAGIC:
            raise FormatError(name, "footer magic", f"{fmagic!r} is not {FOOTER_MAGIC!r}")
        if crc32c.crc32c(footer[:28]) != fcrc:
            raise FormatError(name, "footer crc32c", "the footer's checksum does not match its bytes")
        if slen != len(summary) or count != h.item_count:
            raise FormatError(name, "footer", f"summary of {slen} B / {count} items, header says "
                                              f"{len(summary)} B / {h.item_count} items")
        if crc32c.crc32c(summary) != scrc:
            raise FormatError(name, "summary crc32c", "the block fence does not match its checksum")
        B = h.block_count
        self.fences = np.frombuffer(summary, dtype="<u8", count=B)
        self.block_crcs = np.frombuffer(summary, dtype="<u4", count=B, offset=8 * B)
        if B > 1 and bool(np.any(self.fences[1:] < self.fences[:-1])):
            raise FormatError(name, "fence order", "block fences are not sorted")
        self._fence_list: list[int] = self.fences.tolist()
        self._crc_list: list[int] = self.block_crcs.tolist()
        self._verified = False
        if verify_all:
            for b in range(B):
                start, end = h.block_range(b)
                self._check_block(b, self.source.read(start, end))
            self._verified = True

    def _check_block(self, b: int, data: bytes | memoryview) -> None:
        if crc32c.crc32c(data) != self._crc_list[b]:
            raise FormatError(self.name, "block crc32c", f"block {b} does not match its checksum")

    # -- metadata --------------------------------------------------------------------------------
    @property
    def item_count(self) -> int:
        return self.header.item_count

    @property
    def begin_ms(self) -> int:
        return self.header.begin_ms

    @property
    def min_time_ms(self) -> int | None:
        return self.header.min_ms if self.header.item_count else None

    @property
    def max_time_ms(self) -> int | None:
        return self.header.max_ms if self.header.item_count else None

    def summary_bytes(self) -> int:
        return self.header.block_count * SUMMARY_BYTES_PER_BLOCK

    def close(self) -> None:
        self._fence_list = []
        self.source.close()

    def __enter__(self) -> CompactedIndexReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- queries ---------------------------------------------------------------------------------
    def blocks_for(self, fp: int) -> tuple[int, int]:
        """[first, last) blocks that can hold fingerprint fp (empty when none can)."""
        fences = self._fence_list
        end = bisect.bisect_right(fences, fp)
        if end == 0:
            return 0, 0
        # the run may start at the end of the block before the first fence equal to fp
        start = max(0, bisect.bisect_left(fences, fp) - 1)
        return start, end

    def query(self, topic: str, key: str, max_count: int = 64, begin_ms: int = 0,
              end_ms: int | None = None) -> list[IndexHit]:
        """Hits for `key` in `topic`, store time in [begin_ms, end_ms], newest first, exactly
        min(max_count, matches); one ranged read of the source (none when no block can match)."""
        lo, hi = check_range(begin_ms, end_ms, max_count)
        if max_count == 0:
            return []
        return self.query_fp(_xxh3(f"{topic}#{key}".encode()), topic, key, max_count, lo, hi)

    def query_fp(self, fp: int, topic: str, key: str, max_count: int, lo: int, hi: int) -> list[IndexHit]:
        first, last = self.blocks_for(fp)
        if first == last:
            return []
        h = self.header
        ipb = h.items_per_block
        start = HEADER_SIZE + first * ipb * ITEM_SIZE
        end = h.block_range(last - 1)[1]
        data = self.source.read(start, end)  # the one ranged read
        mv = data if isinstance(data, memoryview) else memoryview(data)
        hits: list[IndexHit] = []
        for b in range(first, last):
            bs = (b - first) * ipb * ITEM_SIZE
            n = min(ipb, h.item_count - b * ipb)
            if not self._verified:
                self._check_block(b, mv[bs:bs + n * ITEM_SIZE])
            # binary search straight on the block's fingerprint column, no array objects built
            fps = mv[bs:bs + 8 * n].cast("Q") if _LITTLE else np.frombuffer(mv, "<u8", n, bs).tolist()
            i = bisect.bisect_left(fps, fp)
            while i < n and fps[i] == fp:
                t = _I64.unpack_from(mv, bs + 8 * n + 8 * i)[0]
                if lo <= t <= hi:
                    off = _I64.unpack_from(mv, bs + 16 * n + 8 * i)[0]
                    q, size = _I32.unpack_from(mv, bs + 24 * n + 4 * i)[0], _I32.unpack_from(mv, bs + 28 * n + 4 * i)[0]
                    hits.append(IndexHit(topic, q, off, size, t, key, True))
                i += 1
            if _LITTLE:
                fps.release()
        if len(hits) > 1:
            return finish_hits(hits, max_count)
        return hits

    def items(self) -> np.ndarray:
        """Every item as a record array (fp, time, offset, queue, size), in file order."""
        h = self.header
        out = np.empty(h.item_count, dtype=[("fp", "<u8"), ("time", "<i8"), ("offset", "<i8"), ("queue", "<i4"),
                                            ("size", "<i4")])
        for b in range(h.block_count):
            bs, be = h.block_range(b)
            block = self.source.read(bs, be)
            if not self._verified:
                self._check_block(b, block)
            n = (be - bs) // ITEM_SIZE
            k = b * h.items_per_block
            for name, col in zip(("fp", "time", "offset", "queue", "size"), block_columns(block, n), strict=True):
                out[name][k:k + n] = col
        return out


def max_time(values: np.ndarray) -> int:
    return int(values.max()) if len(values) else -(1 << 63)


def min_time(values: np.ndarray) -> int:
    return int(values.min()) if len(values) else _I64_MAX
