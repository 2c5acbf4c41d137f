"""Compaction: a sealed native unsealed file -> a native compacted file, vectorised with numpy.

Steps, all on whole columns: verify the source (its checkpoint CRC32Cs), argsort the fingerprints,
re-order the runs of equal fingerprints by (time desc, offset desc, queue desc) with one lexsort
over just those items, drop exact duplicates (the same record indexed twice, e.g. re-dispatched
after a crash), then gather the sorted items chunk by chunk from the mapped source straight into
the mapped destination, block by block, and write the fence, block CRC32Cs and footer.

Memory: the fingerprint column, the sort order and the sorted fingerprints (24 B per item, against
the source's 40 B per item plus slots) and one chunk of gathered items; the source and destination
are memory-mapped files, not copies.
"""

from __future__ import annotations

import mmap
import os
import time
from dataclasses import dataclass

import crc32c
import numpy as np

from index_file.errors import IndexStateError
from index_file.native_compacted import (
    DEFAULT_ITEMS_PER_BLOCK,
    FOOTER_SIZE,
    HEADER_SIZE,
    ITEM_SIZE,
    CompactedHeader,
    max_time,
    min_time,
    pack_footer,
)
from index_file.native_unsealed import NativeIndexWriter

GATHER_BLOCKS = 32  # blocks gathered per step (32 * 2048 items * 40 B = 2.5 MiB of source items)


@dataclass(frozen=True)
class CompactionStats:
    items: int  # items written
    source_items: int
    duplicates_dropped: int
    blocks: int
    bytes: int
    seconds: float


def compact(src_path: str | os.PathLike[str], dst_path: str | os.PathLike[str],
            items_per_block: int = DEFAULT_ITEMS_PER_BLOCK, require_sealed: bool = True) -> CompactionStats:
    """Write the compacted form of the native file at src_path to dst_path (atomically: a temp
    file renamed into place). The source is verified first; FormatError if it is corrupt."""
    started = time.perf_counter()
    src = NativeIndexWriter.open(src_path, writable=False)
    try:
        if require_sealed and not src.sealed:
            raise IndexStateError(f"{src.path}: seal the file before compacting it")
        items = src._items[:src.item_count]
        n_src = len(items)
        fps = np.ascontiguousarray(items["fp"])
        order = np.argsort(fps)
        fps_sorted = fps[order]
        del fps  # peak so far: 24 B per item (fingerprints, order, sorted fingerprints)
        same = fps_sorted[1:] == fps_sorted[:-1]
        dropped = 0
        if same.any():
            in_run = np.zeros(n_src, dtype=bool)
            in_run[1:] |= same
            in_run[:-1] |= same
            pos = np.flatnonzero(in_run)
            sub = order[pos]
            rec = items[np.sort(sub)]  # gather in file order (sequential reads), then map back
            where = np.searchsorted(np.sort(sub), sub)
            t, o, q = rec["time"][where], rec["offset"][where], rec["queue"][where]
            perm = np.lexsort((~q, ~o, ~t, fps_sorted[pos]))
            order[pos] = sub[perm]
            t, o, q, s = t[perm], o[perm], q[perm], rec["size"][where][perm]
            # exact duplicates are adjacent now: same fp, time, offset, queue and size
            f = fps_sorted[pos]
            dup = np.zeros(len(pos), dtype=bool)
            dup[1:] = ((pos[1:] == pos[:-1] + 1) & (f[1:] == f[:-1]) & (t[1:] == t[:-1]) & (o[1:] == o[:-1])
                       & (q[1:] == q[:-1]) & (s[1:] == s[:-1]))
            if dup.any():
                keep = np.ones(n_src, dtype=bool)
                keep[pos[dup]] = False
                order = order[keep]
                fps_sorted = fps_sorted[keep]
                dropped = int(dup.sum())
            del rec, t, o, q, s, f, sub, pos, in_run
        del same
        n = len(order)
        B = (n + items_per_block - 1) // items_per_block
        times_all = items["time"]
        header = CompactedHeader(items_per_block, B, n, src.begin_ms, min_time(times_all), max_time(times_all))
        total = header.total_size
        tmp = os.fspath(dst_path) + ".tmp"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            # allocated, not sparse: on a full filesystem fallocate answers ENOSPC as an OSError, where a store
            # into an unallocated page of the mapping would kill the process with SIGBUS
            os.posix_fallocate(fd, 0, total)
            with mmap.mmap(fd, total, access=mmap.ACCESS_WRITE) as out:
                out[0:HEADER_SIZE] = header.pack()
                crcs = np.zeros(B, dtype="<u4")
                step = GATHER_BLOCKS * items_per_block
                # gather whole 40-byte items as opaque values: much faster than a structured gather
                raw = items.view(np.dtype((np.void, items.dtype.itemsize)))
                for c0 in range(0, n, step):
                    c1 = min(n, c0 + step)
                    rec = np.take(raw, order[c0:c1]).view(items.dtype)
                    _write_blocks(out, header, c0 // items_per_block, rec, fps_sorted[c0:c1], crcs)
                raw = rec = None  # release the views into the source mapping
                fences = fps_sorted[::items_per_block].astype("<u8")
                summary = fences.tobytes() + crcs.tobytes()
                so = header.summary_offset
                out[so:so + len(summary)] = summary
                out[so + len(summary):so + len(summary) + FOOTER_SIZE] = pack_footer(header, summary)
            os.fsync(fd)  # writes the mapping's dirty pages too (one page cache), letting other threads run
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        os.replace(tmp, dst_path)
        return CompactionStats(n, n_src, dropped, B, total, time.perf_counter() - started)
    finally:
        src.close()


def _write_blocks(out: mmap.mmap, h: CompactedHeader, first_block: int, rec: np.ndarray, fps: np.ndarray,
                  crcs: np.ndarray) -> None:
    """Write consecutive blocks starting at first_block from gathered, sorted records."""
    ipb = h.items_per_block
    n = len(rec)
    full = n // ipb
    base = HEADER_SIZE + first_block * ipb * ITEM_SIZE
    if full:
        # full blocks: one structured view over the destination, each field a (blocks, ipb) matrix
        dt = np.dtype([("fp", "<u8", (ipb,)), ("time", "<i8", (ipb,)), ("offset", "<i8", (ipb,)),
                       ("queue", "<i4", (ipb,)), ("size", "<i4", (ipb,))])
        view = np.ndarray((full,), dtype=dt, buffer=out, offset=base)
        m = full * ipb
        view["fp"] = fps[:m].reshape(full, ipb)
        for f in ("time", "offset", "queue", "size"):
            view[f] = rec[f][:m].reshape(full, ipb)
        del view
    rest = n - full * ipb
    if rest:
        pos = base + full * ipb * ITEM_SIZE
        k = full * ipb
        for col, dtype, width in (("fp", "<u8", 8), ("time", "<i8", 8), ("offset", "<i8", 8), ("queue", "<i4", 4),
                                  ("size", "<i4", 4)):
            src = fps[k:] if col == "fp" else rec[col][k:]
            out[pos:pos + rest * width] = np.ascontiguousarray(src, dtype=dtype).tobytes()
            pos += rest * width
    for b in range(first_block, first_block + full + (1 if rest else 0)):
        bs, be = h.block_range(b)
        crcs[b] = crc32c.crc32c(out[bs:be])
