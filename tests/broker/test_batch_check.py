"""Checking a client's RecordBatch v2 without decoding its records: valid batches (ours and kafka-python's,
any codec) pass with the header fields read right; every corruption the CRC covers, every truncation and a
record framing that disagrees with the header (even under a recomputed CRC) is a RecordFormatError."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.errors import RecordFormatError
from broker.partitions.batch_check import check_batches, stored_copy
from broker.partitions.records import ProducerRecord, build_batch, parse_batches

records = st.lists(st.builds(ProducerRecord, value=st.one_of(st.none(), st.binary(max_size=300)),
                             key=st.one_of(st.none(), st.binary(max_size=20)),
                             headers=st.lists(st.tuples(st.sampled_from(["KEYS", "UNIQ_KEY", "h"]),
                                                        st.binary(max_size=10)), max_size=3),
                             timestamp_ms=st.integers(0, 2**41)), min_size=1, max_size=40)


def _recrc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(records, st.sampled_from(["none", "none", "gzip", "lz4"])), min_size=1, max_size=3))
def test_valid_batches_pass_with_their_header_fields(batches: list[tuple[list[ProducerRecord], str]]) -> None:
    raws = [build_batch(recs, compression=c) for recs, c in batches]
    data = b"".join(raws)
    checked = check_batches(data)
    assert [(b.start, b.size, b.records_count, b.last_offset_delta) for b in checked] == \
        [(sum(map(len, raws[:i])), len(r), len(recs), len(recs) - 1) for i, (r, (recs, _)) in enumerate(
            zip(raws, batches, strict=True))]
    # kafka-python keeps a batch uncompressed when compression would not shrink it
    assert [b.needs_decode for b in checked] == [pb.header.compression != "none" for pb in parse_batches(data)]


@settings(max_examples=40, deadline=None)
@given(records, st.integers(0, 2**62))
def test_stored_copy_patches_only_the_base_offset(recs: list[ProducerRecord], base: int) -> None:
    raw = build_batch(recs)
    (b,) = check_batches(raw)
    stored = stored_copy(raw, b, base)
    assert stored[8:] == raw[8:] and len(stored) == len(raw)
    (parsed,) = list(parse_batches(stored))  # CRC still valid
    assert [r.offset for r in parsed.records] == list(range(base, base + len(recs)))
    assert [r.value for r in parsed.records] == [r.value for r in recs]


def test_idempotent_producer_fields() -> None:
    bld = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=77,
                                    producer_epoch=3, base_sequence=120, batch_size=1 << 20)
    for i in range(5):
        bld.append(i, 1_700_000_000_000 + i, b"k%d" % i, b"v" * i, [])
    (b,) = check_batches(bytes(bld.build()))
    assert (b.producer_id, b.producer_epoch, b.first_sequence, b.last_sequence, b.records_count) == (77, 3, 120, 124, 5)


@settings(max_examples=150, deadline=None)
@given(records, st.data())
def test_any_flipped_byte_under_the_crc_is_refused(recs: list[ProducerRecord], data: st.DataObject) -> None:
    raw = bytearray(build_batch(recs))
    pos = data.draw(st.integers(0, len(raw) - 1))
    raw[pos] ^= data.draw(st.integers(1, 255))
    if pos < 8 or 12 <= pos < 16:  # base offset and partition leader epoch: outside the CRC, patched by the broker
        check_batches(bytes(raw))
        return
    with pytest.raises(RecordFormatError):
        check_batches(bytes(raw))


@settings(max_examples=60, deadline=None)
@given(records, st.sampled_from(["none", "gzip"]), st.data())
def test_every_truncation_is_refused(recs: list[ProducerRecord], codec: str, data: st.DataObject) -> None:
    raw = build_batch(recs, compression=codec)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(RecordFormatError):
        check_batches(raw[:cut])
    with pytest.raises(RecordFormatError):  # a whole batch followed by a torn one
        check_batches(raw + raw[:cut] if cut else raw + raw[:1])


@settings(max_examples=60, deadline=None)
@given(records, st.integers(-3, 3).filter(lambda d: d != 0))
def test_record_count_that_disagrees_with_the_framing_is_refused_under_a_valid_crc(
        recs: list[ProducerRecord], delta: int) -> None:
    raw = bytearray(build_batch(recs))
    count = len(recs) + delta
    struct.pack_into(">i", raw, 57, count)
    struct.pack_into(">i", raw, 23, count - 1)
    with pytest.raises(RecordFormatError, match="record|count"):
        check_batches(_recrc(raw))


def test_record_lengths_that_run_past_the_batch_are_refused_under_a_valid_crc() -> None:
    raw = bytearray(build_batch([ProducerRecord(b"x" * 50, b"k")] * 3))
    raw[61] = 0x7E  # the first record's length varint: 63 instead of its real length
    with pytest.raises(RecordFormatError, match="record"):
        check_batches(_recrc(raw))
    raw = bytearray(build_batch([ProducerRecord(b"x" * 50, b"k")]))
    raw[61] |= 0x80  # a varint that never ends inside the batch
    raw[62:] = b"\xff" * (len(raw) - 62)
    with pytest.raises(RecordFormatError, match="varint|record"):
        check_batches(_recrc(raw))


@pytest.mark.parametrize("bad, match", [
    (b"", "no record batch"),
    (b"\x00" * 30, "shorter than"),
])
def test_short_input(bad: bytes, match: str) -> None:
    with pytest.raises(RecordFormatError, match=match):
        check_batches(bad)


def test_magic_codec_and_transactional_refused() -> None:
    good = build_batch([ProducerRecord(b"v")])
    for pos, value, match in ((16, 1, "magic"), (22, 0x07, "codec"), (22, 0x10, "transactional"),
                              (22, 0x20, "control")):
        raw = bytearray(good)
        raw[pos] = value
        with pytest.raises(RecordFormatError, match=match):
            check_batches(_recrc(raw))


def test_a_batch_whose_records_do_not_decode_is_logged_and_indexes_nothing(caplog: pytest.LogCaptureFixture) -> None:
    from broker.partitions.kafka_clients.client_batches import stored_entries

    good = build_batch([ProducerRecord(b"v" * 20, b"key-1")])
    assert [e.keys for e in stored_entries("t", 3, 40, good, 1)] == [["key-1"]]
    raw = bytearray(good)
    # record: length varint at 61, attributes 62, timestamp delta 63, offset delta 64, key length 65
    raw[65] = 0x7E  # key length 63: runs past the record, while the record framing stays intact
    bad = _recrc(raw)
    check_batches(bad)  # the acknowledgement path's checks pass: the client built it so
    with caplog.at_level("ERROR", logger="mqindex.broker.client_batches"):
        assert stored_entries("t", 3, 40, bad, 1) == []
    (rec,) = [r for r in caplog.records if r.name == "mqindex.broker.client_batches"]
    assert (rec.topic, rec.partition, rec.offset) == ("t", 3, 40)  # type: ignore[attr-defined]


@settings(max_examples=150, deadline=None)
@given(records, st.integers(0, 2**40))
def test_stored_entries_index_each_record_under_its_keys(recs: list[ProducerRecord], base: int) -> None:
    """The dispatcher's entries of a stored batch: one per record that has index keys (records.index_keys: key,
    KEYS words, UNIQ_KEY), at the record's offset, sized as key + value + headers."""
    from broker.partitions.kafka_clients.client_batches import stored_entries
    from broker.partitions.records import index_keys

    want = []
    for i, r in enumerate(recs):
        keys = index_keys(r)
        if keys:
            size = len(r.key or b"") + len(r.value or b"") + sum(len(k) + len(v or b"") for k, v in r.headers)
            want.append(("t", 2, base + i, size, 7, keys))
    got = [tuple(e[:5]) + (list(e.keys),) for e in stored_entries("t", 2, base, build_batch(recs), 7)]
    assert got == want


def test_the_c_entries_reader_is_built() -> None:
    """`pip install` (make test) builds broker/partitions/_record_entries; without it records are decoded."""
    from broker.partitions.kafka_clients import client_batches

    assert client_batches._record_entries is not None


def _both_ways(payload: bytes, base: int) -> tuple[list, list]:
    from broker.partitions.kafka_clients import client_batches

    compiled = client_batches.stored_entries("t", 2, base, payload, 7)
    saved, client_batches._record_entries = client_batches._record_entries, None
    try:
        return compiled, client_batches.stored_entries("t", 2, base, payload, 7)
    finally:
        client_batches._record_entries = saved


header_records = st.lists(st.builds(
    ProducerRecord, value=st.one_of(st.none(), st.binary(max_size=50)),
    key=st.one_of(st.none(), st.binary(max_size=12), st.sampled_from([b"", b"\xff\xfe", "é".encode()])),
    headers=st.lists(st.tuples(st.sampled_from(["KEYS", "UNIQ_KEY", "h", "é"]),
                               st.one_of(st.none(), st.binary(max_size=12), st.sampled_from([b"a b", b" a  a "]))),
                     max_size=3),
    timestamp_ms=st.integers(0, 2**41)), min_size=1, max_size=20)


@settings(max_examples=300, deadline=None)
@given(header_records, st.sampled_from(["none", "none", "gzip", "lz4", "zstd", "snappy"]), st.integers(0, 2**40))
def test_c_entries_are_the_decoded_entries(recs: list[ProducerRecord], codec: str, base: int) -> None:
    compiled, decoded = _both_ways(build_batch(recs, compression=codec), base)
    assert compiled == decoded
    assert len(compiled) == sum(1 for r in recs if index_keys_of(r))


def index_keys_of(r: ProducerRecord) -> list[str]:
    from broker.partitions.records import index_keys

    return index_keys(r)


@settings(max_examples=400, deadline=None)
@given(header_records, st.data())
def test_damaged_records_index_nothing_either_way(recs: list[ProducerRecord], data: st.DataObject) -> None:
    """Bytes changed inside the records under a recomputed CRC: the C reader indexes what the decoder indexes
    (the whole batch, or nothing when it does not decode), never crashes."""
    raw = bytearray(build_batch(recs))
    raw[data.draw(st.integers(61, len(raw) - 1), "at")] = data.draw(st.integers(0, 255), "byte")
    compiled, decoded = _both_ways(_recrc(raw), 0)
    assert compiled == decoded


def test_catch_up_entries_read_in_c_are_the_decoded_ones(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The re-dispatch of a range (reads.index_entries) reads entries in C from the stored batches: the same
    entries, times (the record's, never after now) and chunks as decoding the records in Python."""
    from broker.node import BrokerNode
    from broker.partitions import reads
    from broker.partitions.client_messages import InMessage

    node = BrokerNode.open(tmp_path / "node", f"file://{tmp_path}/store", f"sqlite:///{tmp_path}/meta.sqlite",
                           upload_interval_s=3600.0, maintenance_interval_s=0)
    try:
        node.create_topic("t", 1)
        for n in range(3):
            node.produce("t", [InMessage(b"v" * i, key=None if i % 3 == 0 else f"k{n}-{i}".encode(),
                                         headers=[("KEYS", b"a b")] if i % 5 == 0 else [],
                                         timestamp=None if i % 2 else 10**12 + i, partition=0)
                               for i in range(2000)])
        node.flush()

        def both(start: int, end: int) -> tuple[list, list]:
            compiled = list(reads.index_entries(node.partitions, "t", 0, start, end, clock=lambda: 15 * 10**11))
            saved, reads._record_entries = reads._record_entries, None
            try:
                return compiled, list(reads.index_entries(node.partitions, "t", 0, start, end,
                                                          clock=lambda: 15 * 10**11))
            finally:
                reads._record_entries = saved

        for start, end in [(0, 6000), (1, 5999), (1999, 4001), (3000, 3001), (6000, 6000)]:
            compiled, decoded = both(start, end)
            assert compiled == decoded
            assert [len(c) for c in compiled] == [len(d) for d in decoded]
        assert sum(map(len, both(0, 6000)[0])) > 4096  # more than one chunk
    finally:
        node.close()


def test_the_c_framing_walk_is_built() -> None:
    """`pip install` (make test) builds broker/partitions/_batch_framing; without it the framing is walked in
    Python."""
    from broker.partitions import batch_check

    assert batch_check._compiled is not None


def _check_both_ways(data: bytes) -> tuple[object, object]:
    """check_batches' answer (the checked batches, or the error's words) with the C walk and the Python walk."""
    from broker.partitions import batch_check

    def answer() -> object:
        try:
            return [(b.start, b.size, b.records_count) for b in check_batches(data)]
        except RecordFormatError as exc:
            return str(exc)

    compiled = answer()
    saved, batch_check._compiled = batch_check._compiled, None
    try:
        return compiled, answer()
    finally:
        batch_check._compiled = saved


@settings(max_examples=300, deadline=None)
@given(records, st.data())
def test_c_framing_walk_answers_as_the_python_walk_on_any_records_field(recs: list[ProducerRecord],
                                                                         data: st.DataObject) -> None:
    """Valid batches, and batches whose records field is rewritten anywhere (lengths, varints that never end,
    counts off by a few) under a recomputed CRC: the same batches pass, the same words name the fault."""
    raw = bytearray(build_batch(recs))
    for _ in range(data.draw(st.integers(0, 3))):
        pos = data.draw(st.integers(61, len(raw) - 1))
        raw[pos] = data.draw(st.sampled_from([0x00, 0x01, 0x0A, 0x7E, 0x7F, 0x80, 0xFF]) | st.integers(0, 255))
    if data.draw(st.booleans()):
        count = len(recs) + data.draw(st.integers(-2, 2))
        struct.pack_into(">i", raw, 57, count)
        struct.pack_into(">i", raw, 23, count - 1)
    compiled, python = _check_both_ways(_recrc(raw))
    assert compiled == python
