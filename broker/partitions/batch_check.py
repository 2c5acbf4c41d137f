"""Checking a client's RecordBatch v2 bytes without decoding its records: what the Kafka produce path does
before it stores a batch as sent.

`check_batches(data)` walks a buffer of concatenated batches and, for each, checks the header (magic 2,
a length inside the buffer, record count = last offset delta + 1, a known codec, not a control batch,
transactional only with a producer id), the CRC-32C the client computed over everything after the CRC field
(the C `crc32c` package), and, for an uncompressed batch, the record framing: exactly `records_count`
length-prefixed records that end exactly at the end of the batch. Records are not decoded (no key, value or
header objects): the index
keys are read later, off the acknowledgement path, by the dispatcher. A compressed batch's framing is
inside its compressed payload; `needs_decode` tells the caller to decode it before storing it.

The varint walk is written here by hand because kafka-python's reader decodes every field of every record
(the cost this module exists to avoid); it reads one varint per record. It runs in C where
broker/partitions/_batch_framing is compiled (the same checks and errors).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import crc32c

from broker.errors import RecordFormatError

_compiled: Any
try:
    from broker.partitions import _batch_framing as _compiled  # built by pip install (setup.py); optional
except ImportError:  # not built: the framing is walked in Python (tests/broker checks CI builds it)
    _compiled = None

_HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61-byte RecordBatch v2 header
HEADER_SIZE = _HEADER.size
CRC_START = 21  # the CRC covers attributes .. end of the batch
_MIN_RECORD = 6  # attributes, timestamp delta, offset delta, key length, value length, header count: 1 byte each
_BASE = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
assert HEADER_SIZE == 61


@dataclass(frozen=True, slots=True)
class CheckedBatch:
    """One checked batch: where it sits in the request and the header fields the produce path needs."""

    start: int  # byte position in the request's records field
    size: int
    attributes: int
    last_offset_delta: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def compression(self) -> int:
        return self.attributes & 0x07

    @property
    def needs_decode(self) -> bool:
        """A compressed batch: its records' framing can only be checked by decompressing it."""
        return self.compression != 0

    @property
    def first_sequence(self) -> int:
        return self.base_sequence

    @property
    def last_sequence(self) -> int:
        return self.base_sequence + self.last_offset_delta


def _walk_records(data: bytes | memoryview, pos: int, end: int, count: int, where: str) -> None:
    """Exactly `count` length-prefixed records from `pos` to `end` (zigzag varint lengths)."""
    if _compiled is not None:
        status, n, pos, length = _compiled.walk(data, pos, end, count)
        if status == _compiled.BAD_VARINT:
            raise RecordFormatError(f"{where}: record {n} has a malformed length varint")
        if status == _compiled.SHORT:
            raise RecordFormatError(f"{where}: record {n} has length {length}")
    else:
        n, pos = _walk_python(data, pos, end, count, where)
    if n != count or pos != end:
        raise RecordFormatError(f"{where}: records field holds {n} record(s) ending at byte {pos - end:+d} "
                                f"from the batch end, header says {count}")


def _walk_python(data: bytes | memoryview, pos: int, end: int, count: int, where: str) -> tuple[int, int]:
    """The walk in Python: (records walked, where it stopped), stopping after count + 1 records."""
    n = 0
    while pos < end:
        b = data[pos]
        pos += 1
        v = b & 0x7F
        shift = 7
        while b & 0x80:
            if pos >= end or shift > 28:
                raise RecordFormatError(f"{where}: record {n} has a malformed length varint")
            b = data[pos]
            pos += 1
            v |= (b & 0x7F) << shift
            shift += 7
        length = (v >> 1) ^ -(v & 1)
        if length < _MIN_RECORD:
            raise RecordFormatError(f"{where}: record {n} has length {length}")
        pos += length
        n += 1
        if n > count:
            break
    return n, pos


def check_batches(data: bytes | memoryview) -> list[CheckedBatch]:
    """Every batch of a client's records field, checked (RecordFormatError naming the first problem)."""
    mv = memoryview(data)
    total = len(mv)
    if total == 0:
        raise RecordFormatError("no record batch in the request")
    out: list[CheckedBatch] = []
    pos = 0
    while pos < total:
        if total - pos < HEADER_SIZE:
            raise RecordFormatError(f"record batch at byte {pos}: {total - pos} bytes, shorter than the "
                                    f"{HEADER_SIZE}-byte header")
        (_base, length, _epoch, magic, crc, attributes, last_delta, _first_ts, _max_ts, producer_id,
         producer_epoch, base_sequence, count) = _HEADER.unpack_from(mv, pos)
        where = f"record batch at byte {pos}"
        if magic != 2:
            raise RecordFormatError(f"{where}: magic {magic}, only v2 (magic 2) is supported")
        size = length + 12
        if size < HEADER_SIZE or pos + size > total:
            raise RecordFormatError(f"{where}: length {length} runs past the {total} bytes given")
        if count <= 0 or last_delta != count - 1:
            raise RecordFormatError(f"{where}: {count} records with last offset delta {last_delta}")
        if attributes & 0x07 > 4:
            raise RecordFormatError(f"{where}: unknown compression codec {attributes & 0x07}")
        if attributes & 0x20:
            raise RecordFormatError(f"{where}: control batches (transaction markers) are written by the broker")
        if attributes & 0x10 and producer_id < 0:
            raise RecordFormatError(f"{where}: a transactional batch needs a producer id")
        # the GIL kept (40 us a MiB): released, the listener's loop would then wait to take it back
        if crc32c.crc32c(mv[pos + CRC_START:pos + size], gil_release_mode=0) != crc:
            raise RecordFormatError(f"{where}: CRC-32C mismatch")
        if attributes & 0x07 == 0:
            _walk_records(mv, pos + HEADER_SIZE, pos + size, count, where)
        out.append(CheckedBatch(pos, size, attributes, last_delta, producer_id, producer_epoch, base_sequence,
                                count))
        pos += size
    return out


def stored_copy(data: bytes | memoryview, batch: CheckedBatch, base_offset: int, leader_epoch: int | None = None
                ) -> bytes:
    """The batch as it is stored: the client's bytes with the base offset (and, when given, the partition
    leader epoch) patched, both outside the CRC, in one copy."""
    if not 0 <= base_offset < 1 << 63:
        raise RecordFormatError(f"base offset {base_offset} out of range")
    mv = memoryview(data)[batch.start:batch.start + batch.size]
    if leader_epoch is None:
        return b"".join((_BASE.pack(base_offset), mv[8:]))
    return b"".join((_BASE.pack(base_offset), mv[8:12], _EPOCH.pack(leader_epoch), mv[16:]))
