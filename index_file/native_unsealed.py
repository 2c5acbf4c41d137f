"""The native unsealed (WRITING) index file: hash slots + head-inserted item chains, batch writes,
concurrent readers, crash recovery from content, sealing.

Layout (little-endian; byte by byte in docs/FORMAT.md):
  header      64 B  @0    magic "MQXU", version, geometry, begin_ms, CRC32C
  checkpoints 2x64 B @64  (A/B, the valid one with the highest seq wins): state, item count,
                          CRC32C of the committed items, CRC32C of the slots (sealed), min/max time
  slots       4 B each    head item index + 1 (0 = empty), padded to 8 bytes
  items       40 B each   fp u64, offset i64, store_time_ms i64, queue_id i32, size i32,
                          next u32 (index + 1 of the next older item of the slot, 0 = end),
                          check u32 (a per-item check word over the other fields and the index)

Write protocol, per chunk of at most CHUNK_ITEMS items: items are written, then the slot heads,
then the other checkpoint copy (seq + 1, count, running CRC32C of the item section), then the count
readers use is published. A reader therefore sees whole batches only, and a crash leaves at most one
chunk torn. Recovery (`NativeIndexWriter.open`) verifies the committed items against the
checkpoint's CRC32C, then accepts items beyond it while their check words hold (the content
counts, not a stale header), clears the torn tail and rebuilds the slots from the items. Told how many
items were synced, it also survives a power failure that kept the newest checkpoint but lost an item
page written before it: it goes back to the older checkpoint copy, or to the check words from item 0,
never below the synced count.

Sealing writes a SEALED checkpoint carrying the CRC32C of the slots and truncates the unused item
space, so every byte of a sealed file is covered by a checksum.
"""

from __future__ import annotations

import mmap
import os
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import crc32c
import numpy as np

from index_file.entry_columns import EntryColumns, entry_columns, fingerprints
from index_file.errors import FormatError, IndexStateError
from index_file.model import AppendResult, IndexEntry, IndexHit, check_range, finish_hits
from index_file.native_unsealed_layout import (
    CHUNK_ITEMS,
    CKPT_SIZE,
    HEADER_SIZE,
    ITEM_DTYPE,
    ITEM_SIZE,
    MAGIC,
    SLOTS_OFFSET,
    STATE_SEALED,
    STATE_WRITING,
    U32,
    VERSION,
    Checkpoint,
    NativeHeader,
    check_both_checkpoints,
    checkpoint_copies,
    file_size,
    item_checks,
    items_offset,
    read_checkpoint,
    walk_chain,
    xxh3,
)
from index_file.native_unsealed_reader import NativeUnsealedReader
from index_file.sorting import stable_order

# the names other modules read from here: the layout's and the read-only view's
__all__ = ["CHUNK_ITEMS", "HEADER_SIZE", "ITEM_DTYPE", "ITEM_SIZE", "MAGIC", "SLOTS_OFFSET", "STATE_SEALED",
           "STATE_WRITING", "VERSION", "NativeIndexWriter", "NativeUnsealedReader", "item_checks", "items_offset"]

_chain: Any
try:
    from index_file import _item_chain as _chain  # built by pip install (setup.py); optional
except ImportError:
    _chain = None
if sys.byteorder != "little":
    _chain = None  # it writes ITEM_DTYPE's little-endian fields as native integers


class NativeIndexWriter:
    """The one WRITING native index file: `put_batch` from one writer thread, `query` from any
    number of reader threads at the same time, `seal` when full.

    Create with `NativeIndexWriter.create(path, begin_ms, slots, max_items)`; reopen after a crash
    with `NativeIndexWriter.open(path)`, which recovers the item count from the content.
    """

    def __init__(self, path: str, fd: int, header: NativeHeader, ckpt: Checkpoint, writable: bool) -> None:
        self.path = path
        self._fd = fd
        self.header = header
        self._ckpt = ckpt
        self._count = ckpt.count
        self._items_crc = ckpt.items_crc
        self._min_ms, self._max_ms = ckpt.min_ms, ckpt.max_ms
        self._write_lock = threading.Lock()
        self._items_off = items_offset(header.slot_count)
        self._slots_reserved = False
        self.sealed = ckpt.state == STATE_SEALED
        self.full = self.sealed or ckpt.count >= header.max_items
        self.closed = False
        #: items found beyond the last checkpoint and kept (recovered), and items cut as a torn tail
        self.recovered_items = 0
        self.torn_items = 0
        #: items the newest checkpoint counted that recovery did not keep (lost before a sync: power failure)
        self.rolled_back_items = 0
        self._map(writable)

    def _map(self, writable: bool) -> None:
        access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
        self._mm = mmap.mmap(self._fd, 0, access=access)
        slots = self.header.slot_count
        n_items = (len(self._mm) - self._items_off) // ITEM_SIZE
        self._slots = np.ndarray((slots,), dtype="<u4", buffer=self._mm, offset=SLOTS_OFFSET)
        self._items = np.ndarray((n_items,), dtype=ITEM_DTYPE, buffer=self._mm, offset=self._items_off)

    # -- lifecycle -------------------------------------------------------------------------------
    @classmethod
    def create(cls, path: str | os.PathLike[str], begin_ms: int, slots: int, max_items: int) -> NativeIndexWriter:
        """A new empty file (sparse; fails if `path` exists)."""
        if slots <= 0 or max_items <= 0 or max_items >= 1 << 32 or slots >= 1 << 32:
            raise ValueError("slots and max_items must be in [1, 2**32)")
        p = os.fspath(path)
        header = NativeHeader(int(slots), int(max_items), int(begin_ms))
        ckpt = Checkpoint(1, STATE_WRITING, 0, 0, 0, (1 << 63) - 1, -(1 << 63))
        fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.ftruncate(fd, file_size(slots, max_items))
            os.pwrite(fd, header.pack(), 0)
            os.pwrite(fd, ckpt.pack(), HEADER_SIZE + (ckpt.seq % 2) * CKPT_SIZE)  # where seq 1 lives
            return cls(p, fd, header, ckpt, writable=True)
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def open(cls, path: str | os.PathLike[str], writable: bool = True,
             synced_items: int | None = None) -> NativeIndexWriter:
        """Open an existing file. A WRITING file is recovered: committed items are verified against
        the checkpoint CRC32C, items written after it are kept while their check words hold, the torn
        tail is cleared and the slots are rebuilt. A SEALED file is verified whole and opened read-only.

        `synced_items`: how many items the caller knows were synced (the index service's checkpoint).
        After a power failure the newest checkpoint may be on disk while item pages written before it
        are not; with `synced_items` recovery then starts from the newest checkpoint copy whose items
        CRC32C verifies (the other copy), else from item 0, every item checked by its check word, and
        cuts what does not verify (`rolled_back_items`), but keeping fewer than `synced_items` items is a
        FormatError. Without it, everything the newest checkpoint counts must verify (a FormatError
        otherwise). Raises FormatError when the file is foreign, truncated or corrupt."""
        p = os.fspath(path)
        fd = os.open(p, os.O_RDWR if writable else os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            head = os.pread(fd, SLOTS_OFFSET, 0)
            header = NativeHeader.parse(p, head)
            if len(head) < SLOTS_OFFSET:
                raise FormatError(p, "truncated", f"{size} bytes has no checkpoint section")
            ckpt = read_checkpoint(p, head)
            full_size = file_size(header.slot_count, header.max_items)
            if ckpt.count > header.max_items:
                raise FormatError(p, "checkpoint count", f"{ckpt.count} items in a file of {header.max_items}")
            if ckpt.state == STATE_SEALED:
                check_both_checkpoints(p, head)
                if size not in (file_size(header.slot_count, ckpt.count), full_size):
                    raise FormatError(p, "file size", f"sealed file of {ckpt.count} items has {size} bytes")
                w = cls(p, fd, header, ckpt, writable=False)
                w._verify_sealed()
                return w
            if size != full_size:
                raise FormatError(p, "file size", f"{size} bytes, a writing file of this geometry has {full_size}")
            w = cls(p, fd, header, ckpt, writable=writable)
            w._recover(writable, checkpoint_copies(head), synced_items)
            return w
        except BaseException:
            os.close(fd)
            raise

    def _verify_sealed(self) -> None:
        c = self._ckpt
        if crc32c.crc32c(self._mm[SLOTS_OFFSET:self._items_off]) != c.slots_crc:
            raise FormatError(self.path, "slots crc32c", "the slot section does not match its checksum")
        if crc32c.crc32c(self._items[:c.count].data) != c.items_crc:
            raise FormatError(self.path, "items crc32c", "the item section does not match its checksum")

    def _recovery_base(self, copies: list[Checkpoint], synced_items: int | None) -> Checkpoint:
        """Where recovery starts: the newest checkpoint, whose committed items must match its CRC32C. With
        `synced_items` (the items beyond it may not have reached the disk), the newest copy whose items match,
        else an empty start (every item is then checked by its check word)."""
        newest = self._ckpt
        for c in copies if synced_items is not None else [newest]:
            if c.state == STATE_WRITING and c.count <= newest.count and \
                    crc32c.crc32c(self._items[:c.count].data) == c.items_crc:
                return c
        if synced_items is None:
            raise FormatError(self.path, "items crc32c",
                              f"the {newest.count} committed items do not match the checkpoint checksum")
        return Checkpoint(newest.seq, STATE_WRITING, 0, 0, 0, (1 << 63) - 1, -(1 << 63))

    def _recover(self, writable: bool, copies: list[Checkpoint], synced_items: int | None = None) -> None:
        newest = self._ckpt
        c = self._recovery_base(copies, synced_items)
        # items after the checkpoint: keep them while their check words hold
        count = c.count
        max_items = self.header.max_items
        while count < max_items:
            window = self._read_items(count, min(max_items, count + CHUNK_ITEMS))
            nonzero = window.view(np.uint8).reshape(-1, ITEM_SIZE).any(axis=1)
            ok = (item_checks(window, count) == window["check"]) & nonzero
            nxt = window["next"].astype(np.int64)
            ok &= nxt <= np.arange(count, count + len(window))  # chains only point at older items
            bad = np.flatnonzero(~ok)
            count += int(bad[0]) if len(bad) else len(window)
            if len(bad):
                break
        if synced_items is not None and count < synced_items:
            raise FormatError(self.path, "items crc32c",
                              f"only {count} items verify, {synced_items} were synced and must be kept")
        self.recovered_items = max(0, count - newest.count)
        self.rolled_back_items = max(0, newest.count - count)
        items = self._items[:count]
        self._min_ms, self._max_ms = c.min_ms, c.max_ms
        if count > c.count:
            times = items["time"][c.count:]
            self._min_ms = min(self._min_ms, int(times.min()))
            self._max_ms = max(self._max_ms, int(times.max()))
        if not writable:
            self._count = count
            return
        # Clear what a torn chunk may have left behind (the writer never runs ahead more than a chunk of the
        # newest checkpoint, which may count more than was kept), and rebuild the slot heads (for every slot,
        # its newest item). Only entries that change are stored: the file is sparse, and a store into a page
        # never written would allocate it (on a full filesystem that is a SIGBUS); the entries that change are
        # in pages the writer already wrote.
        self.torn_items = self._clear_tail(count, max(count, newest.count))
        heads = np.zeros(self.header.slot_count, dtype=np.uint32)
        items = self._items[:count]
        if count:
            slot_of = items["fp"] % np.uint64(self.header.slot_count)
            rev = slot_of[::-1]
            uniq, first_in_rev = np.unique(rev, return_index=True)
            heads[uniq.astype(np.int64)] = (count - first_in_rev).astype(np.uint32)
        changed = np.flatnonzero(self._slots != heads)
        self._slots[changed] = heads[changed]
        self._items_crc = crc32c.crc32c(items[c.count:].data, c.items_crc) if count > c.count else c.items_crc
        self._count = count
        self._write_checkpoint(STATE_WRITING)
        self.full = count >= max_items

    def _clear_tail(self, count: int, written: int) -> int:
        """Zero the items left after `count` (every item the writer may have written: up to a chunk past
        `written`, then on while a chunk still holds any), so none can come back after later writes; returns
        how many were cleared."""
        max_items = self.header.max_items
        cleared = 0
        start, end = count, min(max_items, written + CHUNK_ITEMS)
        while start < end:
            tail = self._read_items(start, end)
            torn = np.flatnonzero(tail.view(np.uint8).reshape(-1, ITEM_SIZE).any(axis=1))
            if not len(torn) and end - start >= CHUNK_ITEMS:
                break  # a whole chunk never written: the writer never got further
            self._items[start + torn] = np.zeros(1, dtype=ITEM_DTYPE)  # written items: their pages exist
            cleared += len(torn)
            start, end = end, min(max_items, end + CHUNK_ITEMS)
        return cleared

    def _read_items(self, start: int, end: int) -> np.ndarray:
        """Items [start, end) read with pread, not through the mapping: recovery looks past the last item
        written, into the file's holes, and on tmpfs a fault on a hole of a shared mapping allocates a page,
        which on a full filesystem is a SIGBUS (read() of a hole allocates nothing)."""
        want = (end - start) * ITEM_SIZE
        data = os.pread(self._fd, want, self._items_off + start * ITEM_SIZE)
        if len(data) != want:
            raise FormatError(self.path, "file size", f"items {start}-{end} lie past the end of the file")
        return np.frombuffer(data, dtype=ITEM_DTYPE)

    def _write_checkpoint(self, state: int, slots_crc: int = 0) -> None:
        seq = self._ckpt.seq + 1
        ckpt = Checkpoint(seq, state, self._count, self._items_crc, slots_crc, self._min_ms, self._max_ms)
        pos = HEADER_SIZE + (seq % 2) * CKPT_SIZE  # alternate copies: a torn write leaves the other one
        self._mm[pos:pos + CKPT_SIZE] = ckpt.pack()
        self._ckpt = ckpt

    def sync(self) -> None:
        """Flush written pages to disk (durability across power loss; a killed process loses nothing
        written to the mapping anyway)."""
        if not self.closed:
            # fdatasync on the mapped file's descriptor writes its dirty mapped pages too (Linux keeps one page
            # cache for both), and unlike mmap.flush() on Python 3.11 it lets other threads run meanwhile
            os.fdatasync(self._fd)

    def seal(self) -> None:
        """No more writes: a SEALED checkpoint with the slot checksum, the unused item space cut off,
        the file flushed and remapped read-only. Queries keep working."""
        with self._write_lock:
            self._require_open()
            if self.sealed:
                return
            slots_crc = crc32c.crc32c(self._mm[SLOTS_OFFSET:self._items_off])
            self._write_checkpoint(STATE_SEALED, slots_crc)
            self._mm.flush()
            os.ftruncate(self._fd, file_size(self.header.slot_count, self._count))
            os.fsync(self._fd)
            # readers in flight keep the old mapping alive; they only touch bytes below the new end
            self._map(writable=False)
            self.sealed = True
            self.full = True

    def close(self) -> None:
        """Release the mapping (callers stop querying first). A writing file stays recoverable."""
        with self._write_lock:
            if self.closed:
                return
            self.closed = True
            if not self.sealed:
                self._mm.flush()
            mm = self._mm
            del self._slots, self._items
            try:
                mm.close()
            except BufferError:
                pass  # a reader still holds a view; the mapping goes with it
            os.close(self._fd)

    def __enter__(self) -> NativeIndexWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _require_open(self) -> None:
        if self.closed:
            raise IndexStateError(f"{self.path}: index file is closed")

    # -- state -----------------------------------------------------------------------------------
    @property
    def item_count(self) -> int:
        return self._count

    @property
    def begin_ms(self) -> int:
        return self.header.begin_ms

    @property
    def min_time_ms(self) -> int | None:
        return self._min_ms if self._count else None

    @property
    def max_time_ms(self) -> int | None:
        return self._max_ms if self._count else None

    @property
    def slot_count(self) -> int:
        return self.header.slot_count

    @property
    def max_items(self) -> int:
        return self.header.max_items

    def used_slots(self) -> int:
        return int(np.count_nonzero(self._slots))

    # -- writes ----------------------------------------------------------------------------------
    def put(self, entry: IndexEntry | Sequence[object]) -> AppendResult:
        return AppendResult.SUCCESS if self.put_batch([entry]) == 1 else AppendResult.FULL

    def put_batch(self, entries: Iterable[IndexEntry | Sequence[object]],
                  columns: EntryColumns | None = None) -> int:
        """Store entries (IndexEntry or 6-tuples) in order; returns how many were stored. An entry
        is stored with all its keys or not at all; when one does not fit the file is full
        (`self.full`), the rest of the batch is not stored and the caller moves on to a new file.
        `columns`: entry_columns(entries) when the caller already has them (entries is then a list)."""
        with self._write_lock:
            self._require_open()
            if self.sealed:
                raise IndexStateError(f"{self.path}: index file is sealed")
            seq = entries if isinstance(entries, list) else list(entries)
            done = 0
            step = CHUNK_ITEMS // 4
            for pos in range(0, len(seq), step):
                if self.full:
                    break
                part = seq[pos:pos + step] if len(seq) > step else seq
                cols = None if columns is None else columns.slice(pos, pos + step) if len(seq) > step else columns
                done += self._put_chunk(part, cols)
            return done

    def _put_chunk(self, chunk: list[IndexEntry | Sequence[object]], columns: EntryColumns | None = None) -> int:
        try:
            # the chunk turned into columns by C-level iteration, in cache-sized parts: touching the
            # entries' objects was the write path's whole cost (see docs/BENCHMARKS.md, "Index write path")
            cols = entry_columns(chunk, with_fingerprints=True) if columns is None else columns
            fps, counts = (cols.fps, cols.counts) if cols.fps is not None else fingerprints(cols.topics, cols.keys)
        except (TypeError, ValueError, IndexError, OverflowError) as exc:
            raise ValueError("entries must be IndexEntry or (topic, queue_id, offset, size, store_time_ms, "
                             f"keys) tuples with integer fields in the int64 range: {exc}") from None
        room = self.header.max_items - self._count
        if counts is None:
            accepted = min(room, len(chunk))
            n = accepted
            one_each = True
        else:
            per_entry = np.asarray(counts, dtype=np.int64)
            ends = np.cumsum(per_entry)
            accepted = int(np.searchsorted(ends, room, side="right"))
            n = int(ends[accepted - 1]) if accepted else 0
            # one item per entry only when every accepted entry has exactly one key: a sum equal to the entry
            # count also comes from entries without keys beside entries with several
            one_each = bool(accepted) and bool((per_entry[:accepted] == 1).all())
        if accepted < len(chunk):
            self.full = True
        if accepted == 0:
            return 0
        if accepted < len(chunk):
            cols = cols.slice(0, accepted)
        for c, what in ((cols.queue, "queue_id"), (cols.size, "size")):
            if c.min() < -(1 << 31) or c.max() >= 1 << 31:
                raise ValueError(f"{what} out of the int32 range in this batch")
        if _chain is not None and one_each:  # one item per entry: straight from columns
            columns = [np.ascontiguousarray(c) for c in (fps[:n], cols.queue, cols.offset, cols.size, cols.time)]
            for i in range(0, n, CHUNK_ITEMS):  # at most CHUNK_ITEMS between checkpoints
                j = min(n, i + CHUNK_ITEMS)
                self._append_compiled(j - i, _chain.append_columns, *(c[i:j] for c in columns))
            return accepted
        batch = np.empty(n, dtype=ITEM_DTYPE)
        batch["fp"] = fps[:n]
        if not one_each:
            reps = per_entry[:accepted]
            batch["queue"], batch["offset"] = np.repeat(cols.queue, reps), np.repeat(cols.offset, reps)
            batch["size"], batch["time"] = np.repeat(cols.size, reps), np.repeat(cols.time, reps)
        else:
            batch["queue"], batch["offset"], batch["size"], batch["time"] = cols.queue, cols.offset, cols.size, \
                cols.time
        self._append_items(batch)
        return accepted

    def put_items(self, batch: np.ndarray) -> int:
        """Store items already made by the caller (ITEM_DTYPE rows; fp, queue, offset, size and time set,
        one row per key of a record, a record's rows together), as many as fit in order; returns how many
        were stored. For builders that computed the fingerprints themselves (the Spark build); the caller
        sizes the file so a record is never cut. Writes the rows' next and check fields in place."""
        if batch.dtype != ITEM_DTYPE:
            raise ValueError(f"items must have dtype {ITEM_DTYPE}, got {batch.dtype}")
        with self._write_lock:
            self._require_open()
            if self.sealed:
                raise IndexStateError(f"{self.path}: index file is sealed")
            n = min(len(batch), self.header.max_items - self._count)
            if n < len(batch):
                self.full = True
            if n:
                self._append_items(batch[:n])
            return n

    def _append_items(self, batch: np.ndarray) -> None:
        for i in range(0, len(batch), CHUNK_ITEMS):  # at most CHUNK_ITEMS between checkpoints
            part = batch[i:i + CHUNK_ITEMS]
            if _chain is None:
                self._append(part)
            else:
                self._append_compiled(len(part), _chain.append_rows, np.ascontiguousarray(part).view(np.uint8))

    def _reserve(self, start: int, n: int) -> None:
        """Allocate the blocks the next items (and, once, the slots) will be written to. The file is sparse;
        a store into an unallocated page of the mapping on a full filesystem kills the process with SIGBUS,
        while fallocate answers ENOSPC as an OSError before anything is written."""
        if not self._slots_reserved:
            os.posix_fallocate(self._fd, SLOTS_OFFSET, self._items_off - SLOTS_OFFSET)
            self._slots_reserved = True
        os.posix_fallocate(self._fd, self._items_off + start * ITEM_SIZE, n * ITEM_SIZE)

    def _append(self, batch: np.ndarray) -> None:
        n = len(batch)
        start = self._count
        self._reserve(start, n)
        S = self.header.slot_count
        slot_of = (batch["fp"] % np.uint64(S)).astype(np.int64)
        # head insertion, vectorised: within the batch an item points at the previous item of its
        # slot; the first item of a slot in the batch points at the slot's current head
        order = stable_order(slot_of, S)
        s_sorted = slot_of[order]
        first = np.ones(n, dtype=bool)
        first[1:] = s_sorted[1:] != s_sorted[:-1]
        last = np.ones(n, dtype=bool)
        last[:-1] = first[1:]
        nxt_sorted = np.empty(n, dtype=np.uint32)
        nxt_sorted[first] = self._slots[s_sorted[first]]
        prev_pos = np.flatnonzero(~first)
        nxt_sorted[prev_pos] = (start + order[prev_pos - 1] + 1).astype(np.uint32)
        nxt = np.empty(n, dtype=np.uint32)
        nxt[order] = nxt_sorted
        batch["next"] = nxt
        batch["check"] = item_checks(batch, start)
        self._items[start:start + n] = batch  # 1. the items
        self._slots[s_sorted[last]] = (start + order[last] + 1).astype(np.uint32)  # 2. the slot heads
        self._items_crc = crc32c.crc32c(batch.data, self._items_crc)
        self._appended(n, int(batch["time"].min()), int(batch["time"].max()))

    def _append_compiled(self, n: int, append: Callable[..., tuple[int, int]], *source: object) -> None:
        """`_append` in C (index_file/_item_chain.pyx), the GIL released: `append` writes the n items from
        `source` into the mapping, each item before its slot head."""
        start = self._count
        self._reserve(start, n)
        at = self._items_off + start * ITEM_SIZE
        with memoryview(self._mm) as mv:
            dest = mv[at:at + n * ITEM_SIZE]
            lo, hi = append(dest, mv[SLOTS_OFFSET:SLOTS_OFFSET + 4 * self.header.slot_count], start, *source)
            self._items_crc = crc32c.crc32c(dest, self._items_crc)
            dest.release()
        self._appended(n, lo, hi)

    def _appended(self, n: int, lo_ms: int, hi_ms: int) -> None:
        """n items written after the count, with times in [lo_ms, hi_ms]: the count readers use moves
        (checkpointed)."""
        self._min_ms = min(self._min_ms, lo_ms)
        self._max_ms = max(self._max_ms, hi_ms)
        self._count += n  # 3. the count readers use (checkpointed below)
        self._write_checkpoint(STATE_WRITING)
        if self._count >= self.header.max_items:
            self.full = True

    # -- reads -----------------------------------------------------------------------------------
    def query(self, topic: str, key: str, max_count: int = 64, begin_ms: int = 0,
              end_ms: int | None = None) -> list[IndexHit]:
        """Hits for exactly `key` in `topic` with store time in [begin_ms, end_ms], newest first,
        exactly min(max_count, matches). Safe while another thread writes."""
        lo, hi = check_range(begin_ms, end_ms, max_count)
        limit = self._count  # snapshot first: everything below it is whole
        mm = self._mm
        if max_count == 0 or self.closed:
            self._require_open()
            return []
        fp = xxh3(f"{topic}#{key}".encode())
        head = U32.unpack_from(mm, SLOTS_OFFSET + 4 * (fp % self.header.slot_count))[0]
        if not head:
            return []
        hits = walk_chain(self.path, mm, self._items_off, limit, self.header.max_items, head, fp, topic, key, lo, hi)
        if len(hits) > 1:
            return finish_hits(hits, max_count)
        return hits[:max_count]

    def items(self) -> np.ndarray:
        """The committed items (a read-only copy), in write order."""
        return np.array(self._items[:self._count])
