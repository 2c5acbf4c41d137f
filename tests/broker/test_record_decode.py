"""The C record decoder (aiokafka's Cython RecordBatch reader) against kafka-python's reader, every compression,
and damaged bytes: the decoder answers the same records or a RecordFormatError, never another exception."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from broker.errors import RecordFormatError
from broker.partitions.records import COMPRESSION, ProducerRecord, build_batch, parse_batches

header_lists = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))), max_size=3)
producer_records = st.builds(
    ProducerRecord,
    value=st.one_of(st.none(), st.binary(max_size=300)),
    key=st.one_of(st.none(), st.binary(max_size=30)),
    headers=header_lists,
    timestamp_ms=st.integers(0, 2**41),
)


Row = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def kafka_python_records(raw: bytes) -> list[Row]:
    out = []
    pos = 0
    while pos < len(raw):
        size = struct.unpack_from(">i", raw, pos + 8)[0] + 12
        out.extend((r.offset, r.timestamp, r.key, r.value, list(r.headers))
                   for r in DefaultRecordBatch(raw[pos:pos + size]))
        pos += size
    return out


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.lists(producer_records, min_size=1, max_size=8), min_size=1, max_size=3),
       base=st.integers(0, 2**40), compression=st.sampled_from(sorted(COMPRESSION)))
def test_c_decoder_reads_what_kafka_python_reads(batches: list[list[ProducerRecord]], base: int,
                                                compression: str) -> None:
    raw, offset = b"", base
    for recs in batches:
        raw += build_batch(recs, base_offset=offset, compression=compression)
        offset += len(recs)
    ours = [(r.offset, r.timestamp_ms, r.key, r.value, list(r.headers)) for b in parse_batches(raw) for r in b.records]
    assert ours == kafka_python_records(raw)
    assert [r[0] for r in ours] == list(range(base, offset))


def with_valid_crc(batch: bytearray) -> bytes:
    """The batch with its CRC recomputed, so the decoder walks the damaged records instead of stopping at the CRC."""
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


@settings(max_examples=150, deadline=None)
@given(recs=st.lists(producer_records, min_size=1, max_size=6), compression=st.sampled_from(sorted(COMPRESSION)),
       data=st.data())
def test_damaged_records_give_a_record_format_error(recs: list[ProducerRecord], compression: str,
                                                    data: st.DataObject) -> None:
    raw = bytearray(build_batch(recs, compression=compression))
    body = len(raw) - 61
    if body == 0:
        return
    for _ in range(data.draw(st.integers(1, 4))):
        i = 61 + data.draw(st.integers(0, body - 1))
        raw[i] = data.draw(st.integers(0, 255))
    damaged = with_valid_crc(raw)
    try:
        (batch,) = list(parse_batches(damaged))
    except RecordFormatError as exc:
        assert "record batch at byte 0" in str(exc)
    else:
        assert len(batch.records) == len(recs)


def test_truncated_records_and_wrong_count_are_named() -> None:
    raw = bytearray(build_batch([ProducerRecord(b"a" * 50, b"k"), ProducerRecord(b"b" * 50)]))
    short = raw[:-20]
    struct.pack_into(">i", short, 8, len(short) - 12)
    with pytest.raises(RecordFormatError, match="cannot decode records|records, header says"):
        list(parse_batches(with_valid_crc(short)))
    struct.pack_into(">i", raw, 57, 3)  # the header claims 3 records, the body holds 2
    with pytest.raises(RecordFormatError, match="cannot decode records|records, header says"):
        list(parse_batches(with_valid_crc(raw)))
