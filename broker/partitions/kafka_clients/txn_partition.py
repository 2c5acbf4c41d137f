"""A partition's side of Kafka transactions: control batches (commit/abort markers), open transactions, the last
stable offset (LSO) and the aborted transactions a read_committed consumer must skip.

Markers are Kafka's control batches: attributes bit 5 (control) and bit 4 (transactional), the producer id and
epoch of the transaction, base sequence -1, one record whose key is (version 0, type: 0 abort, 1 commit) and whose
value is (version 0, coordinator epoch), all big-endian.

`PartitionTxns` follows a partition's batches in offset order: a transactional data batch of a producer id with
no open transaction opens one at its base offset; a marker closes it (an abort is kept as
(producer id, first offset, marker offset)).

A marker's value carries the coordinator's number of the transaction it ends (Kafka's "coordinator epoch" field,
which Kafka also keeps increasing per producer and refuses to go back on): a partition remembers the highest
number its durable markers of each producer carry, and a marker whose number is not higher is not written again
(`ClientBatches.append_marker`). So a coordinator that writes a transaction's markers a second time (after its
kill -9, not knowing which were durable) cannot close the producer's next transaction, begun on that partition
meanwhile. Number 0 (markers written before numbering) is always written.

The LSO is the first offset of the oldest open transaction, or the end of the partition. It is rebuilt from the
stored batch headers (the whole partition: there is no stored transaction index yet) the first time a node needs
it at an ownership epoch, and then kept as batches are queued.

`visible` answers, for one stored record, whether a reader outside Kafka (a key or id lookup) may see it: a
record of a transactional batch is visible once a commit marker of its producer follows it in the partition;
an abort marker, or no marker yet (an open transaction), hides it. It reads the partition forward from the
record to the marker, so it works on any node that can read the partition, owner or not.
"""

from __future__ import annotations

import struct
import threading
import time
from bisect import bisect_left, insort
from collections.abc import Iterator
from dataclasses import dataclass, field

import crc32c

from broker.errors import OffsetOutOfRange
from broker.partitions.partition import Partition
from broker.partitions.partition_map import PartitionMap
from broker.partitions.records import BatchHeader, batch_slices, decode_records, encode_batch

CONTROL, TRANSACTIONAL = 0x20, 0x10
ABORT, COMMIT = 0, 1
READ_BYTES = 4 << 20
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


@dataclass(frozen=True)
class _MarkerRecord:
    key: bytes
    value: bytes
    headers: tuple[()] = ()
    timestamp_ms: int = 0


def marker_batch(producer_id: int, epoch: int, commit: bool, coordinator_epoch: int = 0,
                 now_ms: int | None = None) -> bytes:
    """A control batch (base offset 0) ending `producer_id`'s transaction with a commit or an abort."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    rec = _MarkerRecord(_CONTROL_KEY.pack(0, COMMIT if commit else ABORT), _CONTROL_VALUE.pack(0, coordinator_epoch),
                        timestamp_ms=now)
    batch = bytearray(encode_batch([rec], now))
    # attributes, producer id, epoch, base sequence -1; then the CRC-32C over attributes .. end again
    struct.pack_into(">h", batch, 21, CONTROL | TRANSACTIONAL)
    struct.pack_into(">qhi", batch, 43, producer_id, epoch, -1)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def marker_type(raw: bytes | memoryview, h: BatchHeader) -> int:
    """COMMIT or ABORT, read from a control batch's single record (uncompressed by Kafka's rule)."""
    return marker_info(raw, h)[0]


def marker_info(raw: bytes | memoryview, h: BatchHeader) -> tuple[int, int]:
    """(COMMIT or ABORT, the transaction's number in the coordinator epoch field) of a control batch."""
    for r in decode_records(bytes(raw), h, check_crc=False):
        if r.key is not None and len(r.key) >= 4:
            seq = _CONTROL_VALUE.unpack_from(r.value)[1] if r.value is not None and len(r.value) >= 6 else 0
            return int(_CONTROL_KEY.unpack_from(r.key)[1]), int(seq)
    return ABORT, 0


@dataclass
class PartitionTxns:
    """Open and aborted transactions of one partition (see the module's docstring)."""

    open: dict[int, int] = field(default_factory=dict)  # producer id -> first offset of its open transaction
    aborted: list[tuple[int, int, int]] = field(default_factory=list)  # (marker offset, producer id, first offset)
    marked: dict[int, int] = field(default_factory=dict)  # producer id -> highest transaction number of its markers
    span: int = 0  # the longest aborted transaction (marker offset - first offset): how far past a range to look
    #: markers are applied by the thread that makes them durable, data batches under the partition's lock
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def on_batch(self, attributes: int, producer_id: int, base: int, commit: bool | None = None,
                 seq: int = 0) -> None:
        """Follow one batch stored at `base`: `commit` is the marker's type and `seq` its transaction number for
        a control batch. A second marker for a transaction already closed changes nothing."""
        if not attributes & TRANSACTIONAL or producer_id < 0:
            return
        with self.lock:
            if attributes & CONTROL:
                if seq > 0:
                    self.marked[producer_id] = max(seq, self.marked.get(producer_id, 0))
                first = self.open.pop(producer_id, None)
                if first is not None and not commit:
                    insort(self.aborted, (base, producer_id, first))  # markers may become durable out of order
                    self.span = max(self.span, base - first)
            else:
                self.open.setdefault(producer_id, base)

    def has_marker(self, producer_id: int, seq: int) -> bool:
        """Whether a durable marker of the producer's transaction number `seq` (or a later one) is here."""
        with self.lock:
            return seq > 0 and self.marked.get(producer_id, 0) >= seq

    def lso(self, end: int) -> int:
        with self.lock:
            return min([end, *self.open.values()])

    def aborted_in(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions with records in [start, end): those whose
        marker is at `start` or after and whose first record is before `end`. The list is ordered by marker, so
        this looks only from `start` to `end` plus the longest aborted transaction: a read_committed fetch costs
        the same however many transactions the partition's history aborted after it."""
        with self.lock:
            out = []
            stop = end + self.span
            for i in range(bisect_left(self.aborted, (start, -1, -1)), len(self.aborted)):
                marker, pid, first = self.aborted[i]
                if marker > stop:
                    break
                if first < end:
                    out.append((pid, first))
            return out


def scan(parts: PartitionMap, p: Partition, start: int, end: int, into: PartitionTxns) -> None:
    """Follow the stored batches of [start, end) into `into` (headers only, markers' single record)."""
    pos = start
    while pos < end:
        moved = False
        try:
            for rec in parts.storage.read(p.data_stream, pos, end, READ_BYTES):
                for _at, h, raw in batch_slices(rec.payload):
                    if h.attributes & TRANSACTIONAL:
                        kind, seq = marker_info(raw, h) if h.attributes & CONTROL else (ABORT, 0)
                        commit = kind == COMMIT if h.attributes & CONTROL else None
                        into.on_batch(h.attributes, h.producer_id, h.base_offset, commit, seq)
                    if h.next_offset > pos:
                        pos, moved = h.next_offset, True
        except OffsetOutOfRange:
            start_now = parts.start_offset(p)
            moved, pos = start_now > pos, max(pos, start_now)
        if not moved:
            break


class TxnPartitions:
    """The `PartitionTxns` of the partitions this node owns, each rebuilt once per ownership epoch."""

    def __init__(self, parts: PartitionMap) -> None:
        self.parts = parts
        self._state: dict[tuple[str, int], tuple[int, PartitionTxns]] = {}
        self._lock = threading.Lock()

    def forget(self, p: Partition) -> None:
        """Drop the state (an append it followed failed): the next use rebuilds it from the stored batches."""
        self._state.pop((p.topic.name, p.index), None)

    def known(self, p: Partition) -> PartitionTxns | None:
        """The state if already built at this ownership epoch (never reads the partition)."""
        got = self._state.get((p.topic.name, p.index))
        return got[1] if got is not None and got[0] == p.epoch else None

    def of(self, p: Partition) -> PartitionTxns:
        """The state, rebuilt from the partition's batches when not built at this ownership epoch. The rebuild
        holds the partition's lock, so no batch is queued meanwhile."""
        got = self.known(p)
        if got is not None:
            return got
        with p.lock:
            got = self.known(p)
            if got is not None:
                return got
            st = PartitionTxns()
            scan(self.parts, p, self.parts.start_offset(p), p.data.next_offset if p.data is not None else 0, st)
            self._state[(p.topic.name, p.index)] = (p.epoch, st)
            return st


class _Verdicts:
    """Final answers of `visible` (a committed or aborted transaction stays so), bounded."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self.known: dict[tuple[int, int, int], bool] = {}
        self.lock = threading.Lock()

    def get(self, key: tuple[int, int, int]) -> bool | None:
        with self.lock:
            return self.known.get(key)

    def put(self, key: tuple[int, int, int], value: bool) -> None:
        with self.lock:
            if len(self.known) >= self.limit:
                self.known.clear()
            self.known[key] = value


_VERDICTS = _Verdicts()


def _batches(parts: PartitionMap, p: Partition, pos: int, end: int
             ) -> Iterator[tuple[BatchHeader, bytes | memoryview]]:
    """The stored batches from the one holding `pos` up to `end`, in offset order (headers and raw bytes)."""
    while pos < end:
        moved = False
        try:
            for rec in parts.storage.read(p.data_stream, pos, end, READ_BYTES):
                for _at, h, raw in batch_slices(rec.payload):
                    if h.next_offset <= pos:
                        continue
                    yield h, raw
                    pos, moved = h.next_offset, True
        except OffsetOutOfRange:
            return
        if not moved:
            return


def _ending(parts: PartitionMap, p: Partition, producer_id: int, pos: int, end: int) -> bool | None:
    """How the producer's transaction with records before `pos` ends: True (committed), False (aborted), None
    (no marker of it in [pos, end) yet: open)."""
    for h, raw in _batches(parts, p, pos, end):
        if h.base_offset >= pos and h.attributes & CONTROL and h.producer_id == producer_id:
            return marker_type(raw, h) == COMMIT
    return None


def committed_view(parts: PartitionMap, p: Partition, pos: int, stop: int) -> tuple[int, list[tuple[int, int]]]:
    """What a read_committed reader may see of [pos, stop): where it must stop (the first offset of a
    transaction with no marker yet, or `stop`) and the [first, next) offset ranges of batches it skips (markers,
    batches of aborted transactions). Works on any node that can read the partition: a transaction's ending is
    read off the partition (its marker), within the page or after it (once per producer id)."""
    _start, end = parts.bounds(p)
    hidden: list[tuple[int, int]] = []
    pending: dict[int, list[tuple[int, int]]] = {}  # producer id -> its data batches not followed by a marker yet
    for h, raw in _batches(parts, p, pos, stop):
        if not h.attributes & TRANSACTIONAL or h.producer_id < 0:
            continue
        if h.attributes & CONTROL:
            hidden.append((h.base_offset, h.next_offset))
            ranges = pending.pop(h.producer_id, [])
            if ranges and marker_type(raw, h) != COMMIT:
                hidden += ranges
        else:
            pending.setdefault(h.producer_id, []).append((h.base_offset, h.next_offset))
    cap = stop
    for pid, ranges in pending.items():
        known = _VERDICTS.get((p.data_stream, pid, ranges[0][0]))
        ending = known if known is not None else _ending(parts, p, pid, max(stop, ranges[-1][1]), end)
        if ending is None:
            cap = min(cap, ranges[0][0])
        else:
            _VERDICTS.put((p.data_stream, pid, ranges[0][0]), ending)
            if not ending:
                hidden += ranges
    return cap, sorted(r for r in hidden if r[0] < cap)


def visible(parts: PartitionMap, p: Partition, offset: int) -> bool:
    """Whether the record at `offset` may be shown outside Kafka's read_uncommitted (see the module)."""
    start, end = parts.bounds(p)
    if not start <= offset < end:
        return True
    head: BatchHeader | None = None
    try:
        for rec in parts.storage.read(p.data_stream, offset, offset + 1, 1):
            for _at, h, _raw in batch_slices(rec.payload):
                if h.base_offset <= offset < h.next_offset:
                    head = h
    except OffsetOutOfRange:
        return True
    if head is None or not head.attributes & TRANSACTIONAL:
        return True
    if head.attributes & CONTROL:
        return False
    key = (p.data_stream, head.producer_id, head.base_offset)
    known = _VERDICTS.get(key)
    if known is not None:
        return known
    pos = head.next_offset
    while pos < end:
        moved = False
        try:
            for rec in parts.storage.read(p.data_stream, pos, end, READ_BYTES):
                for _at, h, raw in batch_slices(rec.payload):
                    if h.base_offset < pos:
                        continue
                    if h.attributes & CONTROL and h.producer_id == head.producer_id:
                        verdict = marker_type(raw, h) == COMMIT
                        _VERDICTS.put(key, verdict)
                        return verdict
                    pos, moved = h.next_offset, True
        except OffsetOutOfRange:
            return False
        if not moved:
            break
    return False  # no marker yet: an open transaction's records are not shown
