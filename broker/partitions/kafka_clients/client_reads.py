"""Reads for Kafka clients: stored record batches as stored, and offsets by timestamp.

`stored_batches` returns the bytes of the stream records covering [offset, end) exactly as they are stored
(the batches the producers sent, with their base offsets), up to about `max_bytes` (always at least one
batch, as Kafka does, so a batch larger than the limit still makes progress). The first batch may begin
before `offset`: Kafka clients skip the records below the offset they asked for.
"""

from __future__ import annotations

from collections.abc import Iterator

from broker.errors import OffsetOutOfRange
from broker.partitions.partition import Partition
from broker.partitions.partition_map import PartitionMap
from broker.partitions.records import BatchHeader, batch_slices, decode_records

SCAN_READ_BYTES = 1 << 20  # what a scan by timestamp reads from the storage at a time


def stored_batches(parts: PartitionMap, p: Partition, offset: int, max_bytes: int, upto: int | None = None
                   ) -> bytes:
    """The stored batches from `offset`, below `upto` (a read_committed fetch's last stable offset) if given."""
    start, end = parts.bounds(p)
    if upto is not None:
        end = min(end, upto)
    if offset >= end or offset < start:
        return b""
    out: list[bytes] = []
    size = 0
    try:
        for rec in parts.storage.read(p.data_stream, offset, end, max(max_bytes, 1)):
            if out and size + len(rec.payload) > max_bytes:
                break
            out.append(rec.payload)
            size += len(rec.payload)
            if size >= max_bytes:
                break
    except OffsetOutOfRange:
        pass  # trimmed by retention meanwhile: what was read is still valid
    return b"".join(out)


def _stored_batches_from_start(parts: PartitionMap, p: Partition) -> Iterator[tuple[int, BatchHeader, bytes, int]]:
    """(the partition's start offset, header, bytes, byte position in its stream record) of each stored batch
    of the partition, in offset order, read lazily SCAN_READ_BYTES at a time: a scan that stops early reads
    no further, and one that goes to the end holds one chunk at a time, never the partition.

    Retention may trim the partition while it is scanned: the read then raises OffsetOutOfRange, and the
    scan goes on from the new start (the start yielded with the batches after it rises with it, so that
    records below it, trimmed, are not answered)."""
    start, end = parts.bounds(p)
    pos = start
    while pos < end:
        try:
            for rec in parts.storage.read(p.data_stream, pos, end, SCAN_READ_BYTES):
                for at, h, raw in batch_slices(rec.payload):
                    yield start, h, raw, at
                pos = max(pos, rec.last_offset)
            return
        except OffsetOutOfRange:
            new_start = parts.meta.get_stream(p.data_stream).start_offset
            if new_start <= pos:
                raise
            start = pos = new_start


def offset_for_time(parts: PartitionMap, p: Partition, timestamp_ms: int) -> tuple[int, int]:
    """(offset, timestamp) of the first record whose timestamp is >= timestamp_ms; (-1, -1) when none.

    Written here because there is no time index: batches are scanned from the start, lazily, up to the
    first match; a batch whose max timestamp is older is skipped without decoding its records."""
    for start, h, raw, at in _stored_batches_from_start(parts, p):
        if h.max_timestamp < timestamp_ms or h.base_offset + h.last_offset_delta < start:
            continue
        for r in decode_records(raw, h, at):
            if r.timestamp_ms >= timestamp_ms and r.offset >= start:
                return r.offset, r.timestamp_ms
    return -1, -1


def offset_of_max_timestamp(parts: PartitionMap, p: Partition) -> tuple[int, int]:
    """(offset, timestamp) of the record with the largest timestamp, the first of them when several share it;
    (-1, -1) for a partition without records (ListOffsets MAX_TIMESTAMP, KIP-734).

    Without a time index this reads the whole partition, lazily as `offset_for_time` does (one chunk in
    memory at a time); only the batches whose max timestamp is above the best so far are decoded."""
    best = (-1, -1)
    for start, h, raw, at in _stored_batches_from_start(parts, p):
        if best[0] >= 0 and best[0] < start:
            best = (-1, -1)  # the scan started again above a retention trim: everything read before is gone
        if h.max_timestamp <= best[1] or h.base_offset + h.last_offset_delta < start:
            continue
        for r in decode_records(raw, h, at):
            if r.timestamp_ms > best[1] and r.offset >= start:
                best = (r.offset, r.timestamp_ms)
    return best
