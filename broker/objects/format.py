"""AutoMQ S3Stream object format: byte layouts of stream records, data blocks, index entries and the footer.

All integers are big-endian. An object is

    DataBlock*  IndexBlock  Footer

- stream record: magic 0x22 (1), streamId (8), epoch (8), baseOffset (8), count (4), payload length (4), payload;
  or, written since the append time is stored, magic 0x23 (1) with the same fields then appendTime (8, ms since
  the epoch: when the broker appended it, the store time its records are indexed by, see docs/INDEX_SERVICE.md)
  before the payload. Readers take both; a 0x22 record has no append time.
- data block: magic 0x5A (1), flag 0x02 (1), record count (4), data length (4), then the records
- index entry (36 bytes), sorted by (streamId, startOffset): streamId (8), startOffset (8),
  endOffsetDelta (4), recordCount (4), blockPosition (8), blockSize (4)
- footer (48 bytes): index start position (8), index length (4), format version (2), 26 zero bytes,
  magic 0x88e241b785f4cff7 (8). The version covers the whole object (blocks, index, footer): 0 there is
  version 1, the layout above, what every object so far carries (AutoMQ's reserved zeros); a later layout writes
  2, 3, ... and readers refuse a version above FORMAT_VERSION (`ObjectFormatError` naming the object and both
  versions). Stream records carry their own magic as well.

`recordCount` in a block header and an index entry counts stream records (not Kafka records); `blockSize`
includes the 10-byte block header. The pure encode/decode functions live here; object_writer.py and
object_reader.py do the I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from broker.errors import ObjectFormatError

RECORD_MAGIC = 0x22  # a stream record without its append time (written before it was stored)
TIMED_RECORD_MAGIC = 0x23  # a stream record with its append time
BLOCK_MAGIC = 0x5A
BLOCK_FLAG = 0x02
FOOTER_MAGIC = 0x88E241B785F4CFF7
FORMAT_VERSION = 1  # the object layout this version writes and reads (stored as 0 in the footer: see above)
_FOOTER_VERSION = struct.Struct(">H")  # at byte 12 of the footer

RECORD_HEADER = struct.Struct(">bqqqii")  # magic, streamId, epoch, baseOffset, count, payload length
APPEND_TIME = struct.Struct(">q")  # after the header of a TIMED_RECORD_MAGIC record
BLOCK_HEADER = struct.Struct(">bbii")  # magic, flag, record count, data length
INDEX_ENTRY = struct.Struct(">qqiiqi")  # streamId, startOffset, endOffsetDelta, recordCount, position, size
FOOTER = struct.Struct(">qi28xQ")  # index position, index length, 28 zero bytes, magic

UNTIMED_RECORD_HEADER_SIZE = RECORD_HEADER.size  # 33
RECORD_HEADER_SIZE = UNTIMED_RECORD_HEADER_SIZE + APPEND_TIME.size  # 41: the header of a record written now
BLOCK_HEADER_SIZE = BLOCK_HEADER.size  # 10
INDEX_ENTRY_SIZE = INDEX_ENTRY.size  # 36
FOOTER_SIZE = FOOTER.size  # 48

#: a data block is closed once its records reach this many bytes (AutoMQ s3.object.block.size)
DEFAULT_BLOCK_SIZE = 1 << 20

_INT32_MAX = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1

assert (UNTIMED_RECORD_HEADER_SIZE, RECORD_HEADER_SIZE, BLOCK_HEADER_SIZE, INDEX_ENTRY_SIZE, FOOTER_SIZE) == \
    (33, 41, 10, 36, 48)


@dataclass(frozen=True, slots=True)
class StreamRecord:
    """One StreamRecordBatch: `count` offsets [base_offset, base_offset + count) of one stream. `append_ms`: when
    the broker appended it (None for a record written before the append time was stored)."""

    stream_id: int
    epoch: int
    base_offset: int
    count: int
    payload: bytes
    append_ms: int | None = None

    @property
    def last_offset(self) -> int:
        """The offset after this record (exclusive end)."""
        return self.base_offset + self.count

    @property
    def encoded_size(self) -> int:
        return record_header_size(self.append_ms) + len(self.payload)

    def encode(self) -> bytes:
        return encode_record(self)


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One DataBlockIndex: where the block holding [start_offset, end_offset) of a stream lives."""

    stream_id: int
    start_offset: int
    end_offset: int
    record_count: int
    position: int
    size: int

    def encode(self) -> bytes:
        return INDEX_ENTRY.pack(self.stream_id, self.start_offset, self.end_offset - self.start_offset,
                                self.record_count, self.position, self.size)


@dataclass(frozen=True, slots=True)
class Footer:
    index_position: int
    index_length: int

    def encode(self) -> bytes:
        return FOOTER.pack(self.index_position, self.index_length, FOOTER_MAGIC)


def object_key(object_id: int, namespace: str) -> str:
    """reverse(hex8(objectId)) + "/" + namespace + "/" + objectId, e.g. 1 -> 10000000/_kafka_c/1."""
    if object_id < 0 or object_id > 0xFFFFFFFF_FFFFFFFF:
        raise ValueError(f"object id {object_id} out of range")
    return f"{f'{object_id:08x}'[::-1]}/{namespace}/{object_id}"


def namespace_for_cluster(cluster: str) -> str:
    return f"_kafka_{cluster}"


def record_header_size(append_ms: int | None) -> int:
    """The size of the header of a record with (or without, None) an append time."""
    return UNTIMED_RECORD_HEADER_SIZE if append_ms is None else RECORD_HEADER_SIZE


def encode_record_header(rec: StreamRecord) -> bytes:
    """The header a record's payload follows in a data block (and in its WAL body)."""
    if not (0 <= rec.stream_id <= _INT64_MAX and 0 <= rec.base_offset <= _INT64_MAX):
        raise ValueError(f"stream id / offset out of range in {rec.stream_id}:{rec.base_offset}")
    if not (0 < rec.count <= _INT32_MAX) or len(rec.payload) > _INT32_MAX:
        raise ValueError(f"record count {rec.count} or payload size {len(rec.payload)} out of range")
    if rec.append_ms is None:
        return RECORD_HEADER.pack(RECORD_MAGIC, rec.stream_id, rec.epoch, rec.base_offset, rec.count, len(rec.payload))
    if not 0 <= rec.append_ms <= _INT64_MAX:
        raise ValueError(f"append time {rec.append_ms} out of range")
    return RECORD_HEADER.pack(TIMED_RECORD_MAGIC, rec.stream_id, rec.epoch, rec.base_offset, rec.count,
                              len(rec.payload)) + APPEND_TIME.pack(rec.append_ms)


def decode_record_header(data: bytes | memoryview, pos: int = 0) -> tuple[int, int, int, int, int, int | None, int]:
    """(magic, streamId, epoch, baseOffset, count, payload length, append time or None, header size) of the
    record at `pos`; the caller checks the magic (a magic other than the two is returned with no append time)
    and that `pos` + header size fits before calling when the magic is TIMED_RECORD_MAGIC."""
    magic, sid, epoch, base, count, plen = RECORD_HEADER.unpack_from(data, pos)
    if magic != TIMED_RECORD_MAGIC:
        return magic, sid, epoch, base, count, plen, None, UNTIMED_RECORD_HEADER_SIZE
    if len(data) - pos < RECORD_HEADER_SIZE:
        return magic, sid, epoch, base, count, -1, None, RECORD_HEADER_SIZE  # a header cut short: plen -1
    return magic, sid, epoch, base, count, plen, APPEND_TIME.unpack_from(data, pos + UNTIMED_RECORD_HEADER_SIZE)[0], \
        RECORD_HEADER_SIZE


def encode_record(rec: StreamRecord) -> bytes:
    return encode_record_header(rec) + rec.payload


def encode_block_header(record_count: int, data_length: int) -> bytes:
    return BLOCK_HEADER.pack(BLOCK_MAGIC, BLOCK_FLAG, record_count, data_length)


def decode_footer(key: str, data: bytes, object_size: int) -> Footer:
    """Parse and check the 48-byte footer of an object of `object_size` bytes."""
    if object_size < FOOTER_SIZE or len(data) != FOOTER_SIZE:
        raise ObjectFormatError(key, "truncated footer",
                                f"object is {object_size} bytes, a footer needs {FOOTER_SIZE}")
    pos, length, magic = FOOTER.unpack(data)
    if magic != FOOTER_MAGIC:
        raise ObjectFormatError(key, "bad footer magic", f"0x{magic:016x} != 0x{FOOTER_MAGIC:016x}")
    version = _FOOTER_VERSION.unpack_from(data, 12)[0] or 1
    if version > FORMAT_VERSION:
        raise ObjectFormatError(key, "newer format version",
                                f"the footer says version {version}, newer than this version of mqindex reads "
                                f"({FORMAT_VERSION}): written by a newer version? Upgrade this node "
                                "(docs/OPERATIONS.md, Upgrading a cluster)")
    if any(data[14:40]):
        raise ObjectFormatError(key, "bad footer", "reserved bytes are not zero")
    if length < 0 or length % INDEX_ENTRY_SIZE:
        raise ObjectFormatError(key, "bad index length", f"{length} is not a multiple of {INDEX_ENTRY_SIZE}")
    if pos < 0 or pos + length != object_size - FOOTER_SIZE:
        raise ObjectFormatError(key, "bad index position",
                                f"index [{pos}, {pos + length}) does not end at the footer "
                                f"({object_size - FOOTER_SIZE})")
    return Footer(pos, length)


def decode_index(key: str, data: bytes, footer: Footer) -> list[IndexEntry]:
    """Parse the index block and check it: sorted, blocks inside the data region, no overlaps."""
    if len(data) != footer.index_length:
        raise ObjectFormatError(key, "truncated index", f"{len(data)} of {footer.index_length} bytes")
    entries: list[IndexEntry] = []
    prev: IndexEntry | None = None
    for i, (sid, start, delta, count, pos, size) in enumerate(INDEX_ENTRY.iter_unpack(data)):
        e = IndexEntry(sid, start, start + delta, count, pos, size)
        if delta < 0 or count < 0 or size < BLOCK_HEADER_SIZE or pos < 0 or pos + size > footer.index_position:
            raise ObjectFormatError(key, "bad index entry", f"entry {i}: {e}")
        if prev is not None:
            if (sid, start) < (prev.stream_id, prev.start_offset):
                raise ObjectFormatError(key, "index not sorted", f"entry {i}: {e} after {prev}")
            if pos < prev.position + prev.size:
                raise ObjectFormatError(key, "overlapping blocks", f"entry {i}: {e} overlaps {prev}")
        entries.append(e)
        prev = e
    return entries


def decode_block(key: str, data: bytes | memoryview, entry: IndexEntry | None = None) -> list[StreamRecord]:
    """Parse one data block (header + records); checks it against its index entry when given."""
    where = f"block at {entry.position}" if entry is not None else "block"
    mv = memoryview(data)
    if len(mv) < BLOCK_HEADER_SIZE:
        raise ObjectFormatError(key, "bad block", f"{where}: {len(mv)} bytes, shorter than a block header")
    magic, flag, count, length = BLOCK_HEADER.unpack_from(mv, 0)
    if magic != BLOCK_MAGIC or flag != BLOCK_FLAG:
        raise ObjectFormatError(key, "bad block magic", f"{where}: magic 0x{magic & 0xFF:02x} flag 0x{flag & 0xFF:02x}")
    if length != len(mv) - BLOCK_HEADER_SIZE or count < 0:
        raise ObjectFormatError(key, "bad block length",
                                f"{where}: header says {length} data bytes, "
                                f"the block has {len(mv) - BLOCK_HEADER_SIZE}")
    if entry is not None and count != entry.record_count:
        raise ObjectFormatError(key, "bad block", f"{where}: {count} records, index says {entry.record_count}")
    records: list[StreamRecord] = []
    pos = BLOCK_HEADER_SIZE
    end = len(mv)
    for i in range(count):
        if pos + UNTIMED_RECORD_HEADER_SIZE > end:
            raise ObjectFormatError(key, "bad record", f"{where}: record {i} header runs past the block end")
        rmagic, sid, epoch, base, rcount, plen, append_ms, hsize = decode_record_header(mv[:end], pos)
        if rmagic not in (RECORD_MAGIC, TIMED_RECORD_MAGIC):
            raise ObjectFormatError(key, "bad record magic",
                                    f"{where}: record {i} magic 0x{rmagic & 0xFF:02x} is not one this version reads "
                                    f"(0x{RECORD_MAGIC:02x}, 0x{TIMED_RECORD_MAGIC:02x}): damaged, or written by a "
                                    "newer version of mqindex")
        if plen < 0 or rcount <= 0 or pos + hsize + plen > end or (append_ms is not None and append_ms < 0):
            raise ObjectFormatError(key, "bad record", f"{where}: record {i} count {rcount} payload {plen} bytes "
                                                       f"does not fit the block")
        body = pos + hsize
        records.append(StreamRecord(sid, epoch, base, rcount, bytes(mv[body:body + plen]), append_ms))
        pos = body + plen
    if pos != end:
        raise ObjectFormatError(key, "bad block", f"{where}: {end - pos} trailing bytes after {count} records")
    if entry is not None and records:
        first, last = records[0], records[-1]
        if (first.stream_id != entry.stream_id or last.stream_id != entry.stream_id
                or first.base_offset != entry.start_offset or last.last_offset != entry.end_offset):
            raise ObjectFormatError(key, "block does not match its index entry",
                                    f"{where}: records {first.stream_id}:[{first.base_offset}, {last.last_offset}) "
                                    f"vs index {entry.stream_id}:[{entry.start_offset}, {entry.end_offset})")
    return records
