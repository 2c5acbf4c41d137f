"""Reads for Kafka clients: stored record batches as stored, and offsets by timestamp.

`stored_batches` returns the bytes of the stream records covering [offset, end) exactly as they are stored
(the batches the producers sent, with their base offsets), up to about `max_bytes` (always at least one
batch, as Kafka does, so a batch larger than the limit still makes progress). The first batch may begin
before `offset`: Kafka clients skip the records below the offset they asked for.
"""

from __future__ import annotations

from broker.errors import OffsetOutOfRange
from broker.partitions.partition import Partition
from broker.partitions.partition_map import PartitionMap
from broker.partitions.records import parse_batches


def stored_batches(parts: PartitionMap, p: Partition, offset: int, max_bytes: int) -> bytes:
    start, end = parts.bounds(p)
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


def offset_for_time(parts: PartitionMap, p: Partition, timestamp_ms: int) -> tuple[int, int]:
    """(offset, timestamp) of the first record whose timestamp is >= timestamp_ms; (-1, -1) when none.

    Written here because there is no time index: batches are scanned from the start, their max timestamp
    lets whole batches be skipped without decompressing them."""
    start, end = parts.bounds(p)
    pos = start
    while pos < end:
        recs = list(parts.storage.read(p.data_stream, pos, end, 4 << 20))
        if not recs:
            break
        for rec in recs:
            for b in parse_batches(rec.payload):
                if b.header.max_timestamp < timestamp_ms:
                    continue
                for r in b.records:
                    if r.timestamp_ms >= timestamp_ms and r.offset >= start:
                        return r.offset, r.timestamp_ms
            pos = rec.last_offset
    return -1, -1
