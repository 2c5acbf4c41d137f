"""RocketMQ's tiered IndexStoreFile (RIP-65), byte for byte: writer, compaction and reader.

Layout (all integers big-endian), see docs/FORMAT.md:
- header, 28 bytes: magic int @0 (0xBCC50289 while the file has room, 0xBCC50285 once full and
  in compacted files), begin timestamp ms long @4, end timestamp ms long @12, used slot count
  int @20, item count int @24;
- unsealed: `slots` 8-byte slots at 28 + slot*8 whose first int is the head item index (0 =
  empty), then `max_items` 32-byte items at 28 + slots*8 + index*32: hashCode int, topicId int,
  queueId int, offset long, size int, timeDiff int (seconds since begin), next item index int.
  Item 0 is never used, so a file of max N items holds N-1; new items are head-inserted into their
  slot's chain;
- compacted: header (end magic), slots as [int absolute position of the run][int run length in
  bytes] (0, 0 when empty), then the items grouped by slot, newest first, 28 bytes each (the item
  without `next`). Length = 28 + slots*8 + 28*items.

RocketMQ compares only the 32-bit hash, so its hits can be false positives (`Aa` and `BB` collide):
every hit from this module has `exact=False` and must be verified by the caller against the record
it fetches. The format has no checksums: structural checks (magic, sizes, pointers and runs in range,
chains strictly decreasing) turn truncated or foreign files into FormatError, but a bit flip inside
an item can go unnoticed and change an answer. Use the native format where that matters.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from index_file.errors import FormatError, IndexStateError
from index_file.hashing import java_string_hash, rocketmq_hash, rocketmq_slot
from index_file.model import AppendResult, IndexEntry, IndexHit, check_range, finish_hits, unique_keys
from index_file.source import BlobSource, ByteSource, open_source

MAGIC_OPEN = 0xBCC50289
MAGIC_END = 0xBCC50285
HEADER_SIZE = 28
SLOT_SIZE = 8
ITEM_SIZE = 32
COMPACT_ITEM_SIZE = 28
DEFAULT_SLOTS = 5_000_000
DEFAULT_MAX_ITEMS = 20_000_000

_HEADER = struct.Struct(">IqqII")
_ITEM = struct.Struct(">iiiqiii")
_CITEM = struct.Struct(">iiiqii")
_SLOT = struct.Struct(">ii")
_INT = struct.Struct(">i")

ITEM_DTYPE = np.dtype([("hash", ">i4"), ("topic_id", ">i4"), ("queue_id", ">i4"), ("offset", ">i8"),
                       ("size", ">i4"), ("time_diff", ">i4"), ("next", ">i4")])
CITEM_DTYPE = np.dtype([("hash", ">i4"), ("topic_id", ">i4"), ("queue_id", ">i4"), ("offset", ">i8"),
                        ("size", ">i4"), ("time_diff", ">i4")])
assert ITEM_DTYPE.itemsize == ITEM_SIZE and CITEM_DTYPE.itemsize == COMPACT_ITEM_SIZE


def slot_position(slot: int) -> int:
    return HEADER_SIZE + slot * SLOT_SIZE


def item_position(slot_count: int, index: int) -> int:
    return HEADER_SIZE + slot_count * SLOT_SIZE + index * ITEM_SIZE


def unsealed_size(slot_count: int, max_items: int) -> int:
    return HEADER_SIZE + slot_count * SLOT_SIZE + max_items * ITEM_SIZE


def compacted_size(slot_count: int, items: int) -> int:
    return HEADER_SIZE + slot_count * SLOT_SIZE + items * COMPACT_ITEM_SIZE


def default_topic_id(topic: str) -> int:
    """RocketMQ stores a topic id from its metadata; without one we use |hashCode(topic)|."""
    return java_string_hash(topic) & 0x7FFFFFFF


def time_diff_seconds(store_time_ms: int, begin_ms: int) -> int:
    """(timestamp - begin) / 1000 with Java's truncation toward zero."""
    d = store_time_ms - begin_ms
    return d // 1000 if d >= 0 else -((-d) // 1000)


def second_bucket(begin_ms: int, time_diff: int) -> tuple[int, int]:
    """The millisecond interval a stored second-resolution time diff stands for."""
    t = begin_ms + time_diff * 1000
    return (t, t + 999) if time_diff >= 0 else (t - 999, t)


class RocketMQHeader:
    __slots__ = ("magic", "begin_ms", "end_ms", "used_slots", "item_count")

    def __init__(self, magic: int, begin_ms: int, end_ms: int, used_slots: int, item_count: int) -> None:
        self.magic, self.begin_ms, self.end_ms = magic, begin_ms, end_ms
        self.used_slots, self.item_count = used_slots, item_count

    @classmethod
    def parse(cls, name: str, data: bytes | memoryview) -> RocketMQHeader:
        if len(data) < HEADER_SIZE:
            raise FormatError(name, "truncated", f"{len(data)} bytes is shorter than the 28-byte header")
        h = cls(*_HEADER.unpack_from(data, 0))
        if h.magic not in (MAGIC_OPEN, MAGIC_END):
            raise FormatError(name, "magic", f"0x{h.magic:08X} is not a RocketMQ index file magic")
        if h.used_slots < 0 or h.item_count < 0:
            raise FormatError(name, "header counts", f"used slots {h.used_slots}, items {h.item_count}")
        return h

    def pack(self) -> bytes:
        return _HEADER.pack(self.magic, self.begin_ms, self.end_ms, self.used_slots, self.item_count)


def _match(h: int, want: int, time_diff: int, begin: int, lo: int, hi: int) -> bool:
    if h != want:
        return False
    t0, t1 = second_bucket(begin, time_diff)
    return t1 >= lo and t0 <= hi


def _walk_chain(name: str, read: Callable[[int, int], bytes | memoryview], slot_count: int, count: int,
                head: int, want: int, topic: str, key: str, begin: int, lo: int, hi: int) -> list[IndexHit]:
    """Follow one unsealed chain from `head`; items above `count` (being written) are skipped."""
    hits: list[IndexHit] = []
    idx = head
    prev = count + 1
    while idx != 0:
        if idx < 0 or idx >= prev:
            raise FormatError(name, "item chain", f"item index {idx} after {prev} (chains must go to older items)")
        pos = item_position(slot_count, idx)
        h, _tid, qid, off, size, tdiff, nxt = _ITEM.unpack_from(read(pos, pos + ITEM_SIZE), 0)
        if idx <= count and _match(h, want, tdiff, begin, lo, hi):
            t0 = begin + tdiff * 1000
            hits.append(IndexHit(topic, qid, off, size, t0, key, False))
        prev = idx
        idx = nxt
    return hits


class RocketMQIndexWriter:
    """An unsealed RocketMQ IndexStoreFile on local disk (mmap), one writer, concurrent readers.

    Readers see whole puts only: the item is written before its slot points at it, and the count
    readers use is published last.
    """

    def __init__(self, path: str, mm: mmap.mmap, fd: int, slot_count: int, max_items: int,
                 header: RocketMQHeader, topic_id: Callable[[str], int]) -> None:
        self.path = path
        self._mm: mmap.mmap | None = mm
        self._fd = fd
        self.slot_count = slot_count
        self.max_items = max_items
        self._h = header
        self._topic_id = topic_id
        self._lock = threading.Lock()  # one writer at a time
        self.sealed = header.magic == MAGIC_END

    # -- lifecycle -------------------------------------------------------------------------------
    @classmethod
    def create(cls, path: str | os.PathLike[str], begin_ms: int, slots: int = DEFAULT_SLOTS,
               max_items: int = DEFAULT_MAX_ITEMS, topic_id: Callable[[str], int] = default_topic_id
               ) -> RocketMQIndexWriter:
        if slots <= 0 or max_items < 2:
            raise ValueError("slots must be > 0 and max_items >= 2 (item 0 is never used)")
        p = os.fspath(path)
        fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.ftruncate(fd, unsealed_size(slots, max_items))  # sparse: zero slots, zero items
            mm = mmap.mmap(fd, 0, access=mmap.ACCESS_WRITE)
        except BaseException:
            os.close(fd)
            raise
        h = RocketMQHeader(MAGIC_OPEN, int(begin_ms), int(begin_ms), 0, 0)
        mm[0:HEADER_SIZE] = h.pack()
        return cls(p, mm, fd, slots, max_items, h, topic_id)

    @classmethod
    def open(cls, path: str | os.PathLike[str], slots: int = DEFAULT_SLOTS,
             topic_id: Callable[[str], int] = default_topic_id) -> RocketMQIndexWriter:
        """Reopen an unsealed file; counts come from its header, checked against its size."""
        p = os.fspath(path)
        fd = os.open(p, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            with open(p, "rb") as f:
                head = f.read(HEADER_SIZE)
            h = RocketMQHeader.parse(p, head)
            body = size - HEADER_SIZE - slots * SLOT_SIZE
            if body <= 0 or body % ITEM_SIZE:
                raise FormatError(p, "file size", f"{size} bytes is not an unsealed file of {slots} slots")
            max_items = body // ITEM_SIZE
            if h.item_count >= max_items or h.used_slots > slots:
                raise FormatError(p, "header counts", f"{h.item_count} items / {h.used_slots} slots "
                                                      f"in a file of {max_items} items, {slots} slots")
            mm = mmap.mmap(fd, 0, access=mmap.ACCESS_WRITE)
        except BaseException:
            os.close(fd)
            raise
        return cls(p, mm, fd, slots, max_items, h, topic_id)

    def close(self) -> None:
        with self._lock:
            if self._mm is not None:
                self._mm.flush()
                try:
                    self._mm.close()
                except BufferError:
                    pass
                self._mm = None
                os.close(self._fd)

    def __enter__(self) -> RocketMQIndexWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def seal(self) -> None:
        """No more puts; the header takes the end magic."""
        with self._lock:
            mm = self._require_open()
            self._h.magic = MAGIC_END
            mm[0:HEADER_SIZE] = self._h.pack()
            mm.flush()
            self.sealed = True

    # -- state -----------------------------------------------------------------------------------
    @property
    def item_count(self) -> int:
        return self._h.item_count

    @property
    def used_slots(self) -> int:
        return self._h.used_slots

    @property
    def begin_ms(self) -> int:
        return self._h.begin_ms

    @property
    def end_ms(self) -> int:
        return self._h.end_ms

    @property
    def full(self) -> bool:
        return self._h.magic == MAGIC_END

    def _require_open(self) -> mmap.mmap:
        if self._mm is None:
            raise IndexStateError(f"{self.path}: index file is closed")
        return self._mm

    # -- writes ----------------------------------------------------------------------------------
    def put(self, entry: IndexEntry | Sequence[object]) -> AppendResult:
        return AppendResult.SUCCESS if self.put_batch([entry]) == 1 else AppendResult.FULL

    def put_batch(self, entries: Iterable[IndexEntry | Sequence[object]]) -> int:
        """Store entries in order until one does not fit; returns how many were stored. An entry
        is all its keys or nothing; the first one that does not fit marks the file full (end magic)."""
        with self._lock:
            mm = self._require_open()
            if self.sealed:
                raise IndexStateError(f"{self.path}: index file is sealed")
            h = self._h
            done = 0
            for e in entries:
                topic, queue_id, offset, size, store_ms, keys = e  # type: ignore[misc]
                ks = unique_keys(keys)  # type: ignore[arg-type]
                # RocketMQ's rule: count + keys >= max items -> FILE_FULL
                if h.item_count + len(ks) >= self.max_items:
                    h.magic = MAGIC_END
                    mm[0:HEADER_SIZE] = h.pack()
                    self.sealed = True
                    break
                tid = self._topic_id(topic)  # type: ignore[arg-type]
                tdiff = time_diff_seconds(int(store_ms), h.begin_ms)  # type: ignore[call-overload]
                for k in ks:
                    hc = rocketmq_hash(topic, k)  # type: ignore[arg-type]
                    spos = slot_position(rocketmq_slot(hc, self.slot_count))
                    old = _INT.unpack_from(mm, spos)[0]
                    idx = h.item_count + 1
                    _ITEM.pack_into(mm, item_position(self.slot_count, idx), hc, tid, queue_id, offset, size,
                                    tdiff, old)
                    _INT.pack_into(mm, spos, idx)  # publish to readers after the item is whole
                    if old == 0:
                        h.used_slots += 1
                    h.item_count = idx
                h.end_ms = max(h.end_ms, int(store_ms))  # type: ignore[call-overload]
                done += 1
            if done:
                mm[0:HEADER_SIZE] = h.pack()
            return done

    # -- reads -----------------------------------------------------------------------------------
    def query(self, topic: str, key: str, max_count: int = 64, begin_ms: int = 0,
              end_ms: int | None = None) -> list[IndexHit]:
        lo, hi = check_range(begin_ms, end_ms, max_count)
        mm = self._require_open()
        count = self._h.item_count  # snapshot: items above it may be half written
        want = rocketmq_hash(topic, key)
        head = _INT.unpack_from(mm, slot_position(rocketmq_slot(want, self.slot_count)))[0]
        if max_count == 0:
            return []
        hits = _walk_chain(self.path, lambda a, b: memoryview(mm)[a:b], self.slot_count, count, head, want,
                           topic, key, self._h.begin_ms, lo, hi)
        return finish_hits(hits, max_count)


class RocketMQIndexReader:
    """Reads an unsealed or compacted RocketMQ index file from any ByteSource (local mmap or a
    BlobStore object). Uploaded compacted files cost two ranged reads per query (slot, then run)."""

    def __init__(self, source: ByteSource | str | os.PathLike[str], slot_count: int | None = None,
                 layout: str | None = None) -> None:
        self.source = open_source(source)
        name = self.source.name
        self.name = name
        self.header = RocketMQHeader.parse(name, self.source.read(0, HEADER_SIZE))
        size = self.source.size()
        count = self.header.item_count
        if layout is None:
            layout = self._detect_layout(size, slot_count)
        if layout == "compacted":
            if slot_count is None:
                slot_count = (size - HEADER_SIZE - count * COMPACT_ITEM_SIZE) // SLOT_SIZE
            if slot_count <= 0 or size != compacted_size(slot_count, count):
                raise FormatError(name, "file size", f"{size} bytes is not a compacted file of {count} items")
            if self.header.magic != MAGIC_END:
                raise FormatError(name, "magic", "a compacted file must carry the end magic 0xBCC50285")
            self.max_items = count
        elif layout == "unsealed":
            slot_count = DEFAULT_SLOTS if slot_count is None else slot_count
            body = size - HEADER_SIZE - slot_count * SLOT_SIZE
            if body <= 0 or body % ITEM_SIZE:
                raise FormatError(name, "file size", f"{size} bytes is not an unsealed file of {slot_count} slots")
            self.max_items = body // ITEM_SIZE
            if count >= self.max_items:
                raise FormatError(name, "header counts", f"{count} items in a file of {self.max_items}")
        else:
            raise ValueError(f"layout must be 'unsealed' or 'compacted', not {layout!r}")
        if self.header.used_slots > slot_count:
            raise FormatError(name, "header counts", f"{self.header.used_slots} used slots of {slot_count}")
        self.layout = layout
        self.slot_count = slot_count
        self.size = size

    def _detect_layout(self, size: int, slot_count: int | None) -> str:
        count = self.header.item_count
        if slot_count is not None:
            return "compacted" if size == compacted_size(slot_count, count) else "unsealed"
        if self.header.magic == MAGIC_OPEN:
            return "unsealed"
        # the end magic is shared by full unsealed files and compacted ones: a size that is exactly
        # header + whole slots + 28-byte items says compacted (pass layout= to override)
        rest = size - HEADER_SIZE - count * COMPACT_ITEM_SIZE
        if rest > 0 and rest % SLOT_SIZE == 0:
            return "compacted"
        return "unsealed"

    @property
    def item_count(self) -> int:
        return self.header.item_count

    @property
    def used_slots(self) -> int:
        return self.header.used_slots

    @property
    def begin_ms(self) -> int:
        return self.header.begin_ms

    @property
    def end_ms(self) -> int:
        return self.header.end_ms

    def close(self) -> None:
        self.source.close()

    def __enter__(self) -> RocketMQIndexReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def query(self, topic: str, key: str, max_count: int = 64, begin_ms: int = 0,
              end_ms: int | None = None) -> list[IndexHit]:
        lo, hi = check_range(begin_ms, end_ms, max_count)
        if max_count == 0:
            return []
        want = rocketmq_hash(topic, key)
        spos = slot_position(rocketmq_slot(want, self.slot_count))
        slot = self.source.read(spos, spos + SLOT_SIZE)
        begin = self.header.begin_ms
        if self.layout == "unsealed":
            head = _INT.unpack_from(slot, 0)[0]
            if head < 0 or head > self.item_count:
                raise FormatError(self.name, "slot", f"slot points at item {head} of {self.item_count}")
            hits = _walk_chain(self.name, self.source.read, self.slot_count, self.item_count, head, want,
                               topic, key, begin, lo, hi)
            return finish_hits(hits, max_count)
        pos, length = _SLOT.unpack_from(slot, 0)
        if length == 0:
            return []
        first = HEADER_SIZE + self.slot_count * SLOT_SIZE
        if length < 0 or length % COMPACT_ITEM_SIZE or pos < first or pos + length > self.size \
                or (pos - first) % COMPACT_ITEM_SIZE:
            raise FormatError(self.name, "slot run", f"run [{pos}, +{length}) is outside the item section")
        run = self.source.read(pos, pos + length)
        hits = []
        for h, _tid, qid, off, size, tdiff in _CITEM.iter_unpack(run):
            if _match(h, want, tdiff, begin, lo, hi):
                hits.append(IndexHit(topic, qid, off, size, begin + tdiff * 1000, key, False))
        return finish_hits(hits, max_count)

    def iter_items(self) -> np.ndarray:
        """Every stored item as a numpy record array (for inspection and compaction)."""
        count = self.item_count
        if self.layout == "unsealed":
            start = item_position(self.slot_count, 1)
            raw = self.source.read(start, start + count * ITEM_SIZE)
            return np.frombuffer(raw, dtype=ITEM_DTYPE, count=count)
        start = HEADER_SIZE + self.slot_count * SLOT_SIZE
        raw = self.source.read(start, start + count * COMPACT_ITEM_SIZE)
        return np.frombuffer(raw, dtype=CITEM_DTYPE, count=count)


def compact_rocketmq(src: str | os.PathLike[str], dst: str | os.PathLike[str],
                     slot_count: int = DEFAULT_SLOTS) -> int:
    """Rewrite an unsealed RocketMQ file into the compacted layout (vectorised); returns items.

    Items are grouped by their slot (hash % slots); each group becomes one run of 28-byte items,
    newest (highest item index) first, the order RocketMQ's chain walk yields.
    """
    reader = RocketMQIndexReader(src, slot_count=slot_count, layout="unsealed")
    try:
        items = reader.iter_items()
        n = len(items)
        idx = np.arange(1, n + 1, dtype=np.int64)
        hashes = items["hash"].astype(np.int64)
        slots = np.abs(hashes) % slot_count
        # check the chains the compaction relies on: next points to an older item of the same slot
        nxt = items["next"].astype(np.int64)
        bad = (nxt < 0) | (nxt >= idx)
        if bad.any():
            raise FormatError(reader.name, "item chain", f"item {int(idx[bad][0])} points at {int(nxt[bad][0])}")
        order = np.lexsort((-idx, slots))
        runs_slot, run_start, run_len = np.unique(slots[order], return_index=True, return_counts=True)
        first = HEADER_SIZE + slot_count * SLOT_SIZE
        slot_table = np.zeros((slot_count, 2), dtype=">i4")
        slot_table[runs_slot, 0] = first + run_start * COMPACT_ITEM_SIZE
        slot_table[runs_slot, 1] = run_len * COMPACT_ITEM_SIZE
        out = np.empty(n, dtype=CITEM_DTYPE)
        for f in CITEM_DTYPE.names or ():
            out[f] = items[f][order]
        h = RocketMQHeader(MAGIC_END, reader.begin_ms, reader.end_ms, int(len(runs_slot)), n)
        tmp = os.fspath(dst) + ".tmp"
        with open(tmp, "wb") as f:
            f.write(h.pack())
            f.write(slot_table.tobytes())
            f.write(out.tobytes())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dst)
        return n
    finally:
        reader.close()


def open_remote_rocketmq(store: object, key: str, slot_count: int | None = None) -> RocketMQIndexReader:
    """A reader of a RocketMQ file uploaded to a BlobStore (compacted unless slot_count says otherwise)."""
    return RocketMQIndexReader(BlobSource(store, key), slot_count=slot_count)
