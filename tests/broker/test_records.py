"""Kafka RecordBatch v2 build/parse through kafka-python, index keys, message ids."""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from kafka.record.memory_records import MemoryRecords

from broker.errors import MessageIdError, RecordFormatError
from broker.partitions import records as records_module
from broker.partitions.client_messages import InMessage
from broker.partitions.key_text import asked_text, key_from_base64, key_text
from broker.partitions.message_id import MessageId, decode_message_id, encode_message_id
from broker.partitions.records import (
    ProducerRecord,
    build_batch,
    encode_batch,
    has_index_key,
    index_keys,
    parse_batches,
    with_base_offset,
)

header_lists = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))), max_size=4)
producer_records = st.builds(
    ProducerRecord,
    value=st.one_of(st.none(), st.binary(max_size=200)),
    key=st.one_of(st.none(), st.binary(max_size=30)),
    headers=header_lists,
    timestamp_ms=st.integers(0, 2**41),
)


@settings(max_examples=80, deadline=None)
@given(recs=st.lists(producer_records, min_size=1, max_size=12), base=st.integers(0, 2**62),
       compression=st.sampled_from(["none", "gzip"]))
def test_batch_round_trip(recs: list[ProducerRecord], base: int, compression: str) -> None:
    raw = build_batch(recs, base_offset=base, compression=compression)
    (batch,) = list(parse_batches(raw))
    h = batch.header
    assert (h.base_offset, h.records_count, h.next_offset, h.magic) == (base, len(recs), base + len(recs), 2)
    assert h.size == len(raw) and batch.raw == raw
    assert h.first_timestamp == recs[0].timestamp_ms and h.max_timestamp == max(r.timestamp_ms for r in recs)
    for i, (p, r) in enumerate(zip(recs, batch.records, strict=True)):
        assert (r.offset, r.key, r.value, r.timestamp_ms) == (base + i, p.key, p.value, p.timestamp_ms)
        assert r.headers == [(k, v) for k, v in p.headers]


def test_kafka_python_reads_our_bytes_as_memory_records() -> None:
    a = build_batch([ProducerRecord(b"v1", b"k1"), ProducerRecord(b"v2")], base_offset=100)
    b = build_batch([ProducerRecord(b"v3", headers=[("h", b"x")])], base_offset=102)
    mr = MemoryRecords(a + b)
    offsets = [rec.offset for batch in mr for rec in batch]
    assert offsets == [100, 101, 102]
    assert [bt.header.base_offset for bt in parse_batches(a + b)] == [100, 102]


def test_rebasing_keeps_crc_valid() -> None:
    raw = build_batch([ProducerRecord(b"x")])
    moved = with_base_offset(raw, 77)
    (batch,) = parse_batches(moved)
    assert batch.records[0].offset == 77 and batch.header.crc == next(iter(parse_batches(raw))).header.crc


def test_corrupt_batches_raise_record_format_error() -> None:
    raw = build_batch([ProducerRecord(b"value", b"key")])
    flipped = raw[:-1] + bytes([raw[-1] ^ 0xFF])
    with pytest.raises(RecordFormatError, match="CRC"):
        list(parse_batches(flipped))
    with pytest.raises(RecordFormatError, match="shorter"):
        list(parse_batches(raw[:30]))
    with pytest.raises(RecordFormatError, match="runs past"):
        list(parse_batches(raw[:-3]))
    with pytest.raises(RecordFormatError, match="magic"):
        list(parse_batches(raw[:16] + b"\x01" + raw[17:]))
    with pytest.raises(RecordFormatError, match="at least one"):
        build_batch([])
    with pytest.raises(RecordFormatError, match="bytes or None"):
        build_batch([ProducerRecord("text")])  # type: ignore[arg-type]


def test_index_keys() -> None:
    r = ProducerRecord(b"v", key=b"order-1",
                       headers=[("KEYS", b"user-7  order-1 sku-3"), ("UNIQ_KEY", b"u-123"), ("other", b"zzz")])
    assert index_keys(r) == ["order-1", "user-7", "sku-3", "u-123"]
    assert index_keys(ProducerRecord(b"v")) == []
    (batch,) = parse_batches(build_batch([r]))
    assert index_keys(batch.records[0]) == ["order-1", "user-7", "sku-3", "u-123"]


@settings(max_examples=300, deadline=None)
@given(key=st.one_of(st.none(), st.binary(max_size=12), st.sampled_from([b"", b"a", b"\xff", b"k k"])),
       headers=st.lists(st.tuples(st.sampled_from(["KEYS", "UNIQ_KEY", "other"]),
                                  st.one_of(st.none(), st.binary(max_size=12),
                                            st.sampled_from([b"a b", b" a  a ", b"\xff k"]))), max_size=4))
def test_index_keys_are_key_then_keys_words_then_uniq_key_once_each(key: bytes | None,
                                                                    headers: list[tuple[str, bytes | None]]) -> None:
    want: list[str] = []
    raws = [key] + [w for n, v in headers if n == "KEYS" and v for w in v.split(b" ")] \
        + [v for n, v in headers if n == "UNIQ_KEY"]
    for raw in raws:
        if not raw:
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:  # a binary key: U+FDD0 and its base64, never its bytes replaced
            text = "\ufdd0" + base64.b64encode(raw).decode()
        if text not in want:
            want.append(text)
    r = ProducerRecord(b"v", key=key, headers=headers)
    assert index_keys(r) == want
    (batch,) = parse_batches(build_batch([r]))
    assert index_keys(batch.records[0]) == want


def test_binary_keys_that_replacement_would_merge_are_indexed_apart() -> None:
    a, b = ProducerRecord(b"v", key=b"\xff\x01"), ProducerRecord(b"v", key=b"\xfe\x01")
    assert index_keys(a) == ["\ufdd0/wE="] and index_keys(b) == ["\ufdd0/gE="]
    assert key_from_base64("/wE=") == "\ufdd0/wE=" and key_from_base64("b3JkZXItMQ==") == "order-1"
    for bad in ("not base64!", "", "/wE", "é"):
        with pytest.raises(ValueError):
            key_from_base64(bad)


PREFIXED = st.binary(max_size=8).map(lambda b: "\ufdd0".encode() + b)  # UTF-8 text starting with U+FDD0, or not


@settings(max_examples=500, deadline=None)
@given(a=st.binary(min_size=1, max_size=12) | PREFIXED, b=st.binary(min_size=1, max_size=12) | PREFIXED)
def test_key_text_tells_any_two_keys_apart(a: bytes, b: bytes) -> None:
    assume(a != b)
    assert key_text(a) != key_text(b)
    try:
        plain = not a.decode().startswith("\ufdd0")
    except UnicodeDecodeError:
        plain = False
    assert key_text(a) == (a.decode() if plain else "\ufdd0" + base64.b64encode(a).decode())


def test_a_lookup_by_the_text_0_3_0_indexed_a_binary_key_under_still_matches_it() -> None:
    old = "\ufffd\x01"  # b"\xff\x01" decoded with replacement: what 0.3.0's entries hold for it
    binary = ProducerRecord(b"v", key=b"\xff\x01")
    in_keys = ProducerRecord(b"v", headers=[("KEYS", b"a \xff\x01"), ("UNIQ_KEY", b"\xfe\x01")])
    assert has_index_key(binary, old) and has_index_key(binary, "\ufdd0/wE=")
    assert has_index_key(in_keys, old) and has_index_key(in_keys, "\ufdd0/gE=") and has_index_key(in_keys, "a")
    assert not has_index_key(binary, "\ufdd0/gE=") and not has_index_key(ProducerRecord(b"v", key=b"k"), old)
    text = ProducerRecord(b"v", key="\ufdd0/wE=".encode())  # a text key that looks like a binary key's text
    assert index_keys(text) == ["\ufdd0" + base64.b64encode("\ufdd0/wE=".encode()).decode()]
    assert not has_index_key(text, "\ufdd0/wE=") and not has_index_key(binary, index_keys(text)[0])
    assert asked_text("\ufdd0/wE=") == index_keys(text)[0] and asked_text("order-1") == "order-1"


@settings(max_examples=200, deadline=None)
@given(t=st.integers(0, 2**32 - 1), p=st.integers(0, 2**32 - 1), o=st.integers(0, 2**63 - 1))
def test_message_id_round_trip(t: int, p: int, o: int) -> None:
    mid = encode_message_id(t, p, o)
    assert len(mid) == 32 and mid == mid.lower()
    assert decode_message_id(mid) == MessageId(t, p, o) == decode_message_id(mid.upper())
    assert str(MessageId(t, p, o)) == mid


def test_message_id_layout_and_errors() -> None:
    assert encode_message_id(1, 2, 3) == "00000001" "00000002" "0000000000000003"
    for bad, why in [("abc", "32 hex"), ("g" * 32, "non-hex"), ("0" * 31 + " ", "non-hex"),
                     ("0" * 16 + "8" + "0" * 15, "offset"), ("0" * 33, "32 hex")]:
        with pytest.raises(MessageIdError, match=why):
            decode_message_id(bad)
    with pytest.raises(MessageIdError, match="must be a string"):
        decode_message_id(12)  # type: ignore[arg-type]
    for args in [(-1, 0, 0), (2**32, 0, 0), (0, 0, 2**63), (0, True, 0)]:
        with pytest.raises(MessageIdError):
            encode_message_id(*args)


@settings(max_examples=80, deadline=None)
@given(recs=st.lists(producer_records, min_size=1, max_size=30))
def test_uncompressed_batch_is_byte_for_byte_kafka_pythons(recs: list[ProducerRecord]) -> None:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for i, r in enumerate(recs):
        b.append(i, r.timestamp_ms, r.key, r.value, list(r.headers))
    assert build_batch(recs) == bytes(b.build())


def test_bad_record_fields_are_a_record_format_error() -> None:
    for bad in (ProducerRecord("text", None, [], 1),  # type: ignore[arg-type]
                ProducerRecord(b"v", "key", [], 1),  # type: ignore[arg-type]
                ProducerRecord(b"v", None, [(b"name", b"v")], 1),  # type: ignore[list-item]
                ProducerRecord(b"v", None, [("name", "v")], 1)):  # type: ignore[list-item]
        with pytest.raises(RecordFormatError):
            build_batch([bad])


def test_the_c_batch_builder_is_built() -> None:
    """`pip install` (make test) builds broker/partitions/_record_build; without it batches are built in Python."""
    assert records_module._record_build is not None


def _python_built(recs: list[Any], now: int, ts_field: str) -> bytes:
    saved, records_module._record_build = records_module._record_build, None
    try:
        return encode_batch(recs, now, ts_field)
    finally:
        records_module._record_build = saved


@settings(max_examples=150, deadline=None)
@given(recs=st.lists(producer_records, min_size=1, max_size=30), now=st.integers(0, 2**41))
def test_the_c_and_python_batch_builders_give_the_same_bytes(recs: list[ProducerRecord], now: int) -> None:
    recs = [r if i % 3 else ProducerRecord(r.value, r.key, r.headers, None) for i, r in enumerate(recs)]
    compiled = encode_batch(recs, now)
    assert compiled == _python_built(recs, now, "timestamp_ms")
    (batch,) = parse_batches(compiled)
    assert [(r.offset, r.key, r.value, r.timestamp_ms) for r in batch.records] == \
        [(i, r.key, r.value, now if r.timestamp_ms is None else r.timestamp_ms) for i, r in enumerate(recs)]


@settings(max_examples=80, deadline=None)
@given(messages=st.lists(st.builds(InMessage, value=st.none() | st.binary(max_size=50),
                                   key=st.none() | st.binary(max_size=10),
                                   headers=st.lists(st.tuples(st.text(max_size=5), st.binary(max_size=5)), max_size=2),
                                   timestamp=st.none() | st.integers(0, 2**41)), min_size=1, max_size=10))
def test_messages_are_built_by_their_timestamp_field(messages: list[InMessage]) -> None:
    assert encode_batch(messages, 7, "timestamp") == _python_built(messages, 7, "timestamp")


@pytest.mark.parametrize("bad, why", [
    (ProducerRecord("text", None, [], 1), "record 1: key and value must be bytes or None"),
    (ProducerRecord(b"v", "key", [], 1), "record 1: key and value must be bytes or None"),
    (ProducerRecord(b"v", None, [(b"name", b"v")], 1), "record 1: header names must be str"),
    (ProducerRecord(b"v", None, [("name", "v")], 1), "record 1: header names must be str"),
    (ProducerRecord(b"v", None, [], 1.5), "record 1: timestamp must be an int"),
    (ProducerRecord(b"v", None, [], 2**63), "record 1: timestamp 9223372036854775808 out of range"),
])
def test_both_builders_name_the_bad_record(bad: ProducerRecord, why: str) -> None:
    recs = [ProducerRecord(b"ok", None, [], 1), bad]
    for build in (lambda: encode_batch(recs, 0), lambda: _python_built(recs, 0, "timestamp_ms")):
        with pytest.raises(RecordFormatError, match=re.escape(why)):
            build()
