"""Merging native compacted files into one, streamed: a k-way merge of their sorted blocks.

    stats = merge_compacted(readers, dst_path, window_bytes=8 << 20)

Every input is read `window` blocks at a time (one ranged read each: one GET for an uploaded file), each block
checked against its CRC32C. The merge emits every buffered item whose fingerprint is below the smallest "last
buffered fingerprint" of the inputs not yet exhausted (nothing later can sort before it), sorts that chunk by
(fp asc, time desc, offset desc, queue desc) — the compacted order — drops exact duplicates (the same record
indexed in two files: same fingerprint, time, offset, queue and size), and writes whole blocks to the output as
they fill. The output's header (item and block counts) is written last, so the item count need not be known
up front; its begin, oldest and newest times are those of the inputs' union.

Memory: the inputs' windows (`window_bytes` split between the inputs, at least one block each), one chunk of
emitted items, one block being filled, the output's fence and CRC32C per block (12 B per 2,048 items) and the
output's distinct fingerprints (8 B per distinct key, handed back for its key filter). A run of one fingerprint
longer than a window (a key with more entries than a window holds) grows that input's window until the run ends.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import crc32c
import numpy as np

from index_file.native_compacted import (
    DEFAULT_ITEMS_PER_BLOCK,
    HEADER_SIZE,
    ITEM_SIZE,
    CompactedHeader,
    CompactedIndexReader,
    block_columns,
    pack_footer,
)

_COLS = ("fp", "time", "offset", "queue", "size")
_DTYPES = ("<u8", "<i8", "<i8", "<i4", "<i4")
_I64_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class MergeStats:
    items: int  # items written
    source_items: int
    duplicates_dropped: int
    blocks: int
    bytes: int
    begin_ms: int
    min_ms: int | None
    max_ms: int | None
    seconds: float
    fingerprints: np.ndarray = field(repr=False)  # the output's distinct fingerprints, sorted


class _Input:
    """One input's window of buffered items (columns) and the next block to read."""

    def __init__(self, reader: CompactedIndexReader, blocks_per_read: int) -> None:
        self.reader = reader
        self.per_read = blocks_per_read
        self.next_block = 0
        self.cols: list[np.ndarray] = [np.empty(0, dtype=d) for d in _DTYPES]

    @property
    def exhausted(self) -> bool:
        return self.next_block >= self.reader.header.block_count

    def __len__(self) -> int:
        return len(self.cols[0])

    def refill(self) -> None:
        """Append the next window of blocks (one ranged read), each block checked against its CRC32C."""
        h = self.reader.header
        first, last = self.next_block, min(h.block_count, self.next_block + self.per_read)
        start, end = h.block_range(first)[0], h.block_range(last - 1)[1]
        data = memoryview(self.reader.source.read(start, end))
        parts: list[list[np.ndarray]] = [[c] for c in self.cols]
        for b in range(first, last):
            bs, be = (x - start for x in h.block_range(b))
            self.reader._check_block(b, data[bs:be])
            for acc, col in zip(parts, block_columns(data[bs:be], (be - bs) // ITEM_SIZE), strict=True):
                acc.append(col.copy())
        self.cols = [np.concatenate(p) for p in parts]
        self.next_block = last

    def take_below(self, bound: int | None) -> list[np.ndarray]:
        """Remove and return the buffered items with fingerprint < bound (all of them when bound is None)."""
        k = len(self) if bound is None else int(np.searchsorted(self.cols[0], np.uint64(bound), side="left"))
        out = [c[:k] for c in self.cols]
        self.cols = [c[k:] for c in self.cols]
        return out


class _BlockWriter:
    """Writes sorted items to the output as whole blocks, keeping each block's fence and CRC32C."""

    def __init__(self, f: object, items_per_block: int) -> None:
        self.f = f
        self.ipb = items_per_block
        self.pending: list[list[np.ndarray]] = [[] for _ in _COLS]
        self.pending_n = 0
        self.fences: list[int] = []
        self.crcs: list[int] = []
        self.items = 0

    def add(self, cols: list[np.ndarray]) -> None:
        if not len(cols[0]):
            return
        for acc, c in zip(self.pending, cols, strict=True):
            acc.append(c)
        self.pending_n += len(cols[0])
        if self.pending_n >= self.ipb:
            self._write(final=False)

    def finish(self) -> None:
        self._write(final=True)

    def _write(self, final: bool) -> None:
        cols = [np.concatenate(p) if p else np.empty(0, dtype=d) for p, d in zip(self.pending, _DTYPES, strict=True)]
        n = len(cols[0])
        full = n // self.ipb
        upto = n if final else full * self.ipb
        for s in range(0, upto, self.ipb):
            e = min(upto, s + self.ipb)
            block = b"".join(np.ascontiguousarray(c[s:e], dtype=d).tobytes() for c, d in zip(cols, _DTYPES,
                                                                                               strict=True))
            self.f.write(block)  # type: ignore[attr-defined]
            self.fences.append(int(cols[0][s]))
            self.crcs.append(crc32c.crc32c(block))
            self.items += e - s
        self.pending = [[c[upto:]] for c in cols]
        self.pending_n = n - upto


def _sorted_unique(cols: list[np.ndarray]) -> tuple[list[np.ndarray], int]:
    """A chunk in compacted order with exact duplicates dropped, and how many were dropped."""
    fp, t, o, q, s = cols
    order = np.lexsort((~q, ~o, ~t, fp))
    fp, t, o, q, s = fp[order], t[order], o[order], q[order], s[order]
    if len(fp) > 1:
        dup = np.zeros(len(fp), dtype=bool)
        dup[1:] = (fp[1:] == fp[:-1]) & (t[1:] == t[:-1]) & (o[1:] == o[:-1]) & (q[1:] == q[:-1]) & (s[1:] == s[:-1])
        if dup.any():
            keep = ~dup
            return [fp[keep], t[keep], o[keep], q[keep], s[keep]], int(dup.sum())
    return [fp, t, o, q, s], 0


def merge_compacted(readers: list[CompactedIndexReader], dst_path: str | os.PathLike[str],
                    window_bytes: int = 8 << 20, items_per_block: int = DEFAULT_ITEMS_PER_BLOCK) -> MergeStats:
    """Write the merge of `readers` (native compacted files, local or in the store) to dst_path, fsynced.
    FormatError when an input fails a check (nothing is left at dst_path then)."""
    if not readers:
        raise ValueError("nothing to merge")
    started = time.perf_counter()
    block_bytes = items_per_block * ITEM_SIZE
    per_read = max(1, window_bytes // (len(readers) * block_bytes))
    inputs = [_Input(r, per_read) for r in readers if r.header.item_count]
    nonempty = [r.header for r in readers if r.header.item_count]
    begin = min(r.header.begin_ms for r in readers)
    mn = min((h.min_ms for h in nonempty), default=None)
    mx = max((h.max_ms for h in nonempty), default=None)
    source_items = sum(r.header.item_count for r in readers)
    dropped = 0
    uniques: list[np.ndarray] = []
    path = os.fspath(dst_path)
    try:
        with open(path, "wb") as f:
            f.write(b"\0" * HEADER_SIZE)
            out = _BlockWriter(f, items_per_block)
            for inp in inputs:
                inp.refill()
            while any(len(i) or not i.exhausted for i in inputs):
                live = [i for i in inputs if not i.exhausted]
                bound = min(int(i.cols[0][-1]) if len(i) else 0 for i in live) if live else None
                taken = [i.take_below(bound) for i in inputs if len(i)]
                chunk = [np.concatenate([t[c] for t in taken]) for c in range(len(_COLS))] if taken else []
                if chunk and len(chunk[0]):
                    cols, d = _sorted_unique(chunk)
                    dropped += d
                    fp = cols[0]
                    keep = np.ones(len(fp), dtype=bool)
                    keep[1:] = fp[1:] != fp[:-1]
                    uniques.append(fp[keep])
                    out.add(cols)
                for i in live:  # nothing below the bound is left: read on where the bound came from
                    if not len(i) or int(i.cols[0][0]) == int(i.cols[0][-1]):
                        i.refill()
            out.finish()
            n = out.items
            blocks = len(out.fences)
            header = CompactedHeader(items_per_block, blocks, n, begin, mn if mn is not None else _I64_MAX,
                                     mx if mx is not None else -(1 << 63))
            summary = np.asarray(out.fences, dtype="<u8").tobytes() + np.asarray(out.crcs, dtype="<u4").tobytes()
            f.write(summary)
            f.write(pack_footer(header, summary))
            f.seek(0)
            f.write(header.pack())
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        raise
    fps = np.concatenate(uniques) if uniques else np.empty(0, dtype=np.uint64)
    return MergeStats(n, source_items, dropped, blocks, header.total_size, begin, mn, mx,
                      time.perf_counter() - started, fps)
