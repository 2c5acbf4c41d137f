"""Kafka records as the broker stores them: RecordBatch v2 bytes built with kafka-python's codec and parsed
with aiokafka's C (Cython) codec.

A produced batch is built with offsets relative to 0 and stamped with its base offset when the broker
assigns it (`with_base_offset`, outside the CRC so the bytes stay valid). `parse_batches` walks a buffer
of concatenated batches, checks each CRC and yields `KafkaBatch` (header fields + records).
Decoding runs in C: aiokafka's `DefaultRecordBatch` (its Cython build, `aiokafka.record._crecords`) checks
the CRC, decompresses and walks the varint layout of the records about 20x faster than kafka-python's pure
Python reader, which is what a whole-record read spends its time on. `Record` is a named tuple so that each
decoded record costs one tuple, not a frozen dataclass's per-field `object.__setattr__`.
`index_keys` gives the keys a record is indexed under: its key, every key in header `KEYS` (space
separated) and header `UNIQ_KEY`, each as key_text.key_text reads it (binary keys included, without loss).
"""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import crc32c
import zstandard
from aiokafka import codec as codecs
from aiokafka.errors import KafkaError as AioKafkaError
from aiokafka.record.default_records import DefaultRecordBatch as CRecordBatch
from cramjam import DecompressionError
from kafka.errors import KafkaError
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from broker.errors import RecordFormatError
from broker.partitions.batch_check import CRC_START
from broker.partitions.key_text import is_replaced_text, key_text, replaced_text

_record_build: Any
try:
    from broker.partitions import _record_build  # built by pip install (setup.py); optional
except ImportError:  # not built: batches are encoded in Python (tests/broker checks CI builds it)
    _record_build = None

HEADER_KEYS = "KEYS"
HEADER_UNIQ_KEY = "UNIQ_KEY"

_HEADER = DefaultRecordBatch.HEADER_STRUCT  # 61 bytes
BATCH_HEADER_SIZE = _HEADER.size
_MAX_BATCH = (1 << 31) - 1
COMPRESSION = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
LOG_APPEND_TIME = 0x08  # batch attribute: every record's timestamp is the batch's max timestamp


@dataclass(frozen=True)
class ProducerRecord:
    """What a producer sends: key, value, headers (name, bytes), timestamp (ms; None = now)."""

    value: bytes | None
    key: bytes | None = None
    headers: Sequence[tuple[str, bytes | None]] = ()
    timestamp_ms: int | None = None


class Record(NamedTuple):
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]

    def header(self, name: str) -> bytes | None:
        for k, v in self.headers:
            if k == name:
                return v
        return None


@dataclass(frozen=True)
class BatchHeader:
    base_offset: int
    length: int  # bytes after the length field
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return self.length + 12

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> str:
        code = self.attributes & 0x07
        return next((n for n, c in COMPRESSION.items() if c == code), f"unknown({code})")

    @property
    def timestamp_type(self) -> str:
        return "LOG_APPEND_TIME" if self.attributes & 0x08 else "CREATE_TIME"

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & 0x10)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & 0x20)


@dataclass(frozen=True)
class KafkaBatch:
    header: BatchHeader
    records: list[Record]
    raw: bytes


def _zigzag_varint(n: int) -> bytes:
    v = (n << 1) ^ (n >> 63)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


_SMALL = 1 << 14
_VARINT = [_zigzag_varint(n) for n in range(_SMALL)]  # lengths, deltas and counts below 16 KiB: one lookup
_NULL = _zigzag_varint(-1)
_BATCH_HEAD = struct.Struct(">qiibIhiqqqhii")
_BATCH_TAIL = struct.Struct(">hiqqqhii")  # attributes .. records count: the CRC-covered part of the header


def _varint(n: int) -> bytes:
    return _VARINT[n] if 0 <= n < _SMALL else _zigzag_varint(n)


def encode_batch(records: Sequence[Any], now: int | None = None, ts_field: str = "timestamp_ms") -> bytes:
    """The uncompressed RecordBatch v2 (base offset 0) of `records`: objects with `key`, `value`, `headers` and
    a timestamp in attribute `ts_field` (a ProducerRecord's `timestamp_ms`, an InMessage's `timestamp`); a
    record without one gets `now` (default: the build time, as kafka-python does). Built in C where
    broker/partitions/_record_build is compiled, else in Python; both give the same bytes."""
    if not records:
        raise RecordFormatError("a record batch needs at least one record")
    if now is None:
        now = int(time.time() * 1000)
    if _record_build is not None:
        return _record_build.encode(list(records), now, ts_field)  # type: ignore[no-any-return]
    return _encode_uncompressed(records, now, ts_field)


def _encode_uncompressed(records: Sequence[Any], now: int, ts_field: str) -> bytes:
    """The bytes kafka-python's DefaultRecordBatchBuilder makes for an uncompressed batch, in one pass.

    Written by hand because the builder costs several Python calls per field of every record (the produce
    path's largest cost); `tests/broker/test_records.py` checks both give the same bytes."""
    first = getattr(records[0], ts_field)
    if first is None:
        first = now
    if not isinstance(first, int):
        raise RecordFormatError("record 0: timestamp must be an int")
    max_ts = first
    parts: list[bytes] = []
    add = parts.append
    varints, small, null = _VARINT, _SMALL, _NULL
    for i, r in enumerate(records):
        key, value, ts = r.key, r.value, getattr(r, ts_field)
        if ts is None:
            ts = now
        if not isinstance(ts, int):
            raise RecordFormatError(f"record {i}: timestamp must be an int")
        if not -(1 << 63) <= ts < 1 << 63:
            raise RecordFormatError(f"record {i}: timestamp {ts} out of range")
        if ts > max_ts:
            max_ts = ts
        if not (key is None or isinstance(key, bytes)) or not (value is None or isinstance(value, bytes)):
            raise RecordFormatError(f"record {i}: key and value must be bytes or None")
        d = ts - first
        fields = [b"\x00", varints[d] if 0 <= d < small else _zigzag_varint(d),
                  varints[i] if i < small else _zigzag_varint(i)]
        if key is None:
            fields.append(null)
        else:
            fields += (_varint(len(key)), key)
        if value is None:
            fields.append(null)
        else:
            fields += (_varint(len(value)), value)
        if r.headers:
            fields.append(_varint(len(r.headers)))
            for name, hv in r.headers:
                if not isinstance(name, str) or not (hv is None or isinstance(hv, bytes)):
                    raise RecordFormatError(f"record {i}: header names must be str, header values bytes or None")
                nb = name.encode("utf-8")
                fields += (_varint(len(nb)), nb, null if hv is None else _varint(len(hv)))
                if hv is not None:
                    fields.append(hv)
        else:
            fields.append(b"\x00")
        size = sum(map(len, fields))
        add(varints[size] if size < small else _zigzag_varint(size))
        parts += fields
    body = b"".join(parts)
    n = len(records)
    tail_header = _BATCH_TAIL.pack(0, n - 1, first, max_ts, -1, -1, -1, n)
    crc = crc32c.crc32c(body, crc32c.crc32c(tail_header))
    return b"".join((struct.pack(">qiibI", 0, len(body) + BATCH_HEADER_SIZE - 12, 0, 2, crc), tail_header, body))


def build_batch(records: Sequence[ProducerRecord], base_offset: int = 0, compression: str = "none") -> bytes:
    """RecordBatch v2 bytes holding `records` at offsets base_offset, base_offset + 1, ..."""
    if not records:
        raise RecordFormatError("a record batch needs at least one record")
    if compression not in COMPRESSION:
        raise RecordFormatError(f"unknown compression {compression!r}; use one of {sorted(COMPRESSION)}")
    if compression == "none":
        batch = encode_batch(records)
        return batch if base_offset == 0 else with_base_offset(batch, base_offset)
    b = DefaultRecordBatchBuilder(magic=2, compression_type=COMPRESSION[compression], is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=_MAX_BATCH)
    for i, r in enumerate(records):
        try:
            headers = [(k, v) for k, v in r.headers]
            meta = b.append(i, r.timestamp_ms, r.key, r.value, headers)
        except (TypeError, AttributeError) as exc:
            raise RecordFormatError(f"record {i}: key and value must be bytes or None, header names str, "
                                    f"header values bytes or None ({exc})") from None
        if meta is None:
            raise RecordFormatError(f"record {i} does not fit in one batch")
    return with_base_offset(bytes(b.build()), base_offset)


def with_base_offset(batch: bytes, base_offset: int) -> bytes:
    """The same batch with its base offset set (the CRC does not cover it)."""
    if not 0 <= base_offset < 1 << 63:
        raise RecordFormatError(f"base offset {base_offset} out of range")
    if len(batch) < BATCH_HEADER_SIZE:
        raise RecordFormatError(f"record batch of {len(batch)} bytes is shorter than "
                                f"its {BATCH_HEADER_SIZE}-byte header")
    return b"".join((struct.pack(">q", base_offset), memoryview(batch)[8:]))  # one copy (a slice and + are two)


def parse_header(data: bytes | memoryview, pos: int = 0) -> BatchHeader:
    if len(data) - pos < BATCH_HEADER_SIZE:
        raise RecordFormatError(f"record batch at byte {pos}: {len(data) - pos} bytes, "
                                f"shorter than the {BATCH_HEADER_SIZE}-byte header")
    h = BatchHeader(*_HEADER.unpack_from(data, pos))
    if h.magic != 2:
        raise RecordFormatError(f"record batch at byte {pos}: magic {h.magic}, only v2 (magic 2) is supported")
    if h.length < BATCH_HEADER_SIZE - 12 or pos + h.size > len(data):
        raise RecordFormatError(f"record batch at byte {pos}: length {h.length} runs past the {len(data)} bytes given")
    if h.records_count < 0 or h.last_offset_delta < 0:
        raise RecordFormatError(f"record batch at byte {pos}: negative record count or offset delta")
    return h


def batch_slices(data: bytes | memoryview) -> Iterator[tuple[int, BatchHeader, bytes]]:
    """(byte position, header, bytes) of every batch in a buffer of concatenated RecordBatch v2 bytes."""
    mv = memoryview(data)
    pos = 0
    while pos < len(mv):
        h = parse_header(mv, pos)
        # a stream record usually holds one batch: its bytes are the batch, no copy needed
        raw = data if pos == 0 and h.size == len(mv) and isinstance(data, bytes) else bytes(mv[pos:pos + h.size])
        yield pos, h, raw
        pos += h.size


def parse_batches(data: bytes | memoryview, check_crc: bool = True) -> Iterator[KafkaBatch]:
    """Every batch in a buffer of concatenated RecordBatch v2 bytes, CRC-checked."""
    for pos, h, raw in batch_slices(data):
        yield KafkaBatch(h, decode_records(raw, h, pos, check_crc), raw)


_new = tuple.__new__
# what each codec raises on damaged bytes: gzip (zlib.error, OSError, EOFError), snappy (cramjam), zstd
# (zstandard), lz4 (RuntimeError), the record walker (aiokafka's CorruptRecordException)
_DECODE_ERRORS = (AioKafkaError, KafkaError, struct.error, IndexError, ValueError, UnicodeDecodeError, OSError,
                  EOFError, zlib.error, DecompressionError, zstandard.ZstdError, RuntimeError)
_DECOMPRESS = {1: codecs.gzip_decode, 2: codecs.snappy_decode, 3: codecs.lz4_decode, 4: codecs.zstd_decode}


def walk_records(walk: Any, raw: bytes, h: BatchHeader, pos: int, *args: Any) -> Any:
    """`walk(records, record count, *args)` over the batch's record bytes, decompressed: a C record walker
    (api/http/_record_json, broker/partitions/_record_entries). A record it cannot parse (ValueError) is a
    RecordFormatError naming the batch."""
    records = records_section(raw, h, pos)
    try:
        return walk(records, h.records_count, *args)
    except ValueError as exc:  # a record that does not parse, a header name that is not UTF-8
        raise undecodable(h, pos, exc, name=False) from None


def undecodable(h: BatchHeader, pos: int, exc: BaseException, name: bool = True) -> RecordFormatError:
    """The error of a batch whose records do not decode (its header `h`, at byte `pos`), naming the batch."""
    detail = f"{type(exc).__name__}: {exc}" if name else str(exc)
    return RecordFormatError(f"record batch at byte {pos} (base offset {h.base_offset}): cannot decode records "
                             f"({detail})")


def verify_crc(raw: bytes | memoryview, h: BatchHeader, pos: int = 0) -> None:
    """RecordFormatError unless the batch's bytes match the CRC-32C in its header."""
    if crc32c.crc32c(memoryview(raw)[CRC_START:]) != h.crc:
        raise RecordFormatError(f"record batch at byte {pos} (base offset {h.base_offset}): CRC mismatch")


def records_section(raw: bytes, h: BatchHeader, pos: int = 0) -> bytes | memoryview:
    """The bytes of a batch's records (what follows its header), decompressed with the codecs aiokafka's
    reader uses; damage raises RecordFormatError naming the batch."""
    body = memoryview(raw)[BATCH_HEADER_SIZE:]
    codec = h.attributes & 0x07
    if not codec:
        return body
    decompress = _DECOMPRESS.get(codec)
    try:
        if decompress is None:
            raise ValueError(f"unknown codec {codec}")
        return decompress(body.tobytes())  # type: ignore[no-any-return]
    except _DECODE_ERRORS as exc:
        raise undecodable(h, pos, exc) from None


def batch_records(raw: bytes, h: BatchHeader, pos: int = 0, check: bool = True) -> list[Any]:
    """aiokafka's records of one batch (`raw`, whose header `h` is already parsed), CRC-checked, decompressed;
    damage raises RecordFormatError naming the batch."""
    if check:
        verify_crc(raw, h, pos)
    try:
        recs = list(CRecordBatch(raw))
    except _DECODE_ERRORS as exc:
        raise undecodable(h, pos, exc) from None
    if len(recs) != h.records_count:
        raise RecordFormatError(f"record batch at byte {pos}: {len(recs)} records, header says {h.records_count}")
    return recs


def decode_records(raw: bytes, h: BatchHeader, pos: int = 0, check_crc: bool = True) -> list[Record]:
    """The records of one batch (`raw`, whose header `h` is already parsed), CRC-checked, decompressed."""
    # tuple.__new__ directly: a named tuple's own __new__ is a Python function, one more frame per record
    return [_new(Record, (r.offset, r.timestamp, r.key, r.value, r.headers)) for r in batch_records(raw, h, pos,
                                                                                                      check_crc)]


def record_size(record: Any) -> int:
    """The size an index entry carries for a record (a Record, ProducerRecord or message): key + value + every
    header name and value."""
    size = len(record.key or b"") + len(record.value or b"")
    if record.headers:
        size += sum(len(k) + len(v or b"") for k, v in record.headers)
    return size


def index_keys(record: Any) -> list[str]:
    """Keys the record (a Record, ProducerRecord or message: anything with `key` and `headers`) is indexed under,
    de-duplicated in order: key, each of header KEYS, header UNIQ_KEY."""
    if not record.headers:  # most records: the key alone (a non-empty key decodes to a non-empty text)
        return [key_text(record.key)] if record.key else []
    out: list[str] = []
    for raw in _raw_keys(record):
        if (k := key_text(raw)) not in out:
            out.append(k)
    return out


def _raw_keys(record: Any) -> Iterator[bytes]:
    """The non-empty keys of a record as stored: its key, the words of header KEYS, header UNIQ_KEY."""
    if record.key:
        yield record.key
    headers = record.headers or ()
    for name, value in headers:
        if name == HEADER_KEYS and value:
            yield from (part for part in value.split(b" ") if part)
    for name, value in headers:
        if name == HEADER_UNIQ_KEY and value:
            yield value


def has_index_key(record: Any, key: str) -> bool:
    """Whether `record` is indexed under `key` (an indexed text, as key_text gives it): what a lookup checks each
    hit's record against. A key holding U+FFFD also matches a record with a key that decodes to it with
    replacements: the entries 0.3.0 wrote for a binary key hold that text, and are still found by it."""
    if key in index_keys(record):
        return True
    return is_replaced_text(key) and any(replaced_text(raw) == key for raw in _raw_keys(record))
