"""The orjson body of a whole-record read is the document FetchOut describes, for any stored message."""

from __future__ import annotations

import base64
import json
import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import api.http.message_json as message_json
from api.http.message_json import Page, messages_json, text_or_base64
from api.http.models import FetchOut
from api.http.routes import message_out
from broker.errors import RecordFormatError
from broker.partitions.client_messages import OutMessage
from broker.partitions.reads import Rendered
from broker.partitions.records import COMPRESSION, LOG_APPEND_TIME, ProducerRecord, build_batch, parse_header

messages = st.builds(
    OutMessage,
    topic=st.from_regex(r"[a-z][a-z0-9._-]{0,20}", fullmatch=True),
    partition=st.integers(0, 2**31 - 1),
    offset=st.integers(0, 2**63 - 1),
    msg_id=st.from_regex(r"[0-9a-f]{32}", fullmatch=True),
    key=st.one_of(st.none(), st.binary(max_size=20), st.text(max_size=20).map(str.encode)),
    value=st.one_of(st.none(), st.binary(max_size=60), st.text(max_size=60).map(str.encode)),
    headers=st.lists(st.tuples(st.text(max_size=6), st.one_of(st.binary(max_size=10), st.none(),
                                                             st.text(max_size=10).map(str.encode))), max_size=3)
    | st.lists(st.tuples(st.sampled_from(["a", "b"]), st.text(max_size=4).map(str.encode)), max_size=4),
    timestamp=st.integers(0, 2**53),
)


@settings(max_examples=150, deadline=None)
@given(ms=st.lists(messages, max_size=6), next_offset=st.integers(0, 2**63 - 1))
def test_fetch_body_is_the_fetch_out_document(ms: list[OutMessage], next_offset: int) -> None:
    page = Page()
    page.out += messages_json(ms)
    body = bytes(page.body([Rendered(len(ms), ms[-1].offset, len(page.out))] if ms else [], next_offset))
    model = FetchOut(messages=[message_out(m) for m in ms], next_offset=next_offset).model_dump(mode="json")
    assert json.loads(body) == model
    assert body == json.dumps(model, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


@settings(max_examples=300, deadline=None)
@given(m=messages)
def test_a_peer_reads_the_message_back_whole(m: OutMessage) -> None:
    """Another node's page of the message, as a key lookup's node reads it (broker/cluster/peers.py): the same key,
    value and headers, byte for byte (a null header value, a name given twice, bytes that are not UTF-8)."""
    from broker.cluster.peers import _message

    assert _message(json.loads(messages_json([m]))) == m._replace(headers=list(m.headers))


def reference(data: bytes) -> tuple[str, str]:
    try:
        return data.decode(), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode(), "base64"


utf8_edges = st.lists(st.sampled_from([b"a", b"\x7f", b"\x80", b"\xbf", b"\xc0", b"\xc1", b"\xc2", b"\xdf", b"\xe0",
                                       b"\xa0", b"\x9f", b"\xed", b"\xee", b"\xef", b"\xf0", b"\x90", b"\x8f",
                                       b"\xf4", b"\xf5", b"\xff", "é".encode(), "€".encode(), "😀".encode()]),
                      max_size=48).map(b"".join)


# past the 64-byte probe for bytes UTF-8 never has: a long valid start, then anything
long_then_edges = st.tuples(st.text(min_size=20, max_size=80).map(str.encode), utf8_edges).map(b"".join)


@settings(max_examples=2000, deadline=None)
@given(data=st.one_of(st.binary(max_size=80), st.text(max_size=60).map(str.encode), utf8_edges, long_then_edges,
                      st.binary(min_size=60, max_size=200)))
def test_text_or_base64_is_decode_else_base64(data: bytes) -> None:
    assert text_or_base64(data) == reference(data)


def test_the_c_renderer_is_built() -> None:
    """`pip install` (make test) builds api/http/_record_json; without it pages are rendered in Python."""
    assert message_json._record_json is not None


def _rendered(topic: str, topic_id: int, partition: int, start: int, end: int, raw: bytes) -> object:
    """What a page's renderer makes of one batch: (its Rendered items, the page's bytes), or the error."""
    page = Page()
    page.out += b"{}"  # a message already in the page: the batch's messages follow a comma
    try:
        return page.renderer(topic, topic_id, partition, start, end)(parse_header(raw), raw, 0), bytes(page.out)
    except RecordFormatError as exc:
        assert bytes(page.out) == Page.PREFIX + b"{}"  # nothing of the batch was added
        return RecordFormatError, str(exc).split(":")[0]  # which batch; the detail differs between the two


def _python(topic: str, topic_id: int, partition: int, start: int, end: int, raw: bytes) -> object:
    saved, message_json._record_json = message_json._record_json, None
    try:
        return _rendered(topic, topic_id, partition, start, end, raw)
    finally:
        message_json._record_json = saved


def _set_header(raw: bytes, base: int, attributes_or: int) -> bytes:
    b = bytearray(raw)
    struct.pack_into(">q", b, 0, base)
    b[22] |= attributes_or  # low byte of the int16 attributes
    struct.pack_into(">I", b, 17, crc32c.crc32c(bytes(b[21:])))
    return bytes(b)


texts = st.one_of(st.binary(max_size=40), st.text(max_size=30).map(str.encode), utf8_edges,
                  st.sampled_from([b'"\\/\x00\x1f\x7f', "\u2028\ufffd".encode(), b""]))
page_records = st.lists(st.builds(
    ProducerRecord,
    value=st.one_of(st.none(), texts, st.binary(min_size=60, max_size=300)),
    key=st.one_of(st.none(), texts),
    headers=st.lists(st.tuples(st.sampled_from(["KEYS", "UNIQ_KEY", "h", "é\"x"]), st.one_of(st.none(), texts)),
                     max_size=3),
    timestamp_ms=st.integers(0, 2**45)), min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(records=page_records, codec=st.sampled_from(sorted(COMPRESSION)), base=st.integers(0, 2**40),
       append_time=st.booleans(), window=st.tuples(st.integers(-2, 14), st.integers(0, 16)),
       topic=st.from_regex(r"[a-z][a-z0-9._-]{0,20}", fullmatch=True), topic_id=st.integers(0, 2**32 - 1),
       partition=st.integers(0, 2**31 - 1))
def test_the_c_renderer_writes_what_python_writes(records: list[ProducerRecord], codec: str, base: int,
                                                  append_time: bool, window: tuple[int, int], topic: str,
                                                  topic_id: int, partition: int) -> None:
    raw = _set_header(build_batch(records, compression=codec), base, LOG_APPEND_TIME if append_time else 0)
    start, end = base + window[0], base + window[0] + window[1]
    got = _rendered(topic, topic_id, partition, start, end, raw)
    assert got == _python(topic, topic_id, partition, start, end, raw)
    page = Page()
    served = page.renderer(topic, topic_id, partition, start, end)(parse_header(raw), raw, 0)
    doc = json.loads(bytes(page.body(served, served[-1].last_offset + 1 if served else start)))
    assert FetchOut.model_validate(doc).model_dump(mode="json") == doc  # the page is the FetchOut document
    assert [m["offset"] for m in doc["messages"]] == list(range(max(start, base), min(end, base + len(records))))


# any headers: names of any text (escapes, a name given twice), values text, binary, empty or null; past the count
# whose names the renderer compares in C (32) too
header_names = st.one_of(st.text(max_size=8), st.sampled_from(["KEYS", "traceparent", "a", "", '"\\\n']))
header_values = st.one_of(st.none(), texts, st.text(max_size=20).map(str.encode))
any_headers = st.one_of(st.lists(st.tuples(header_names, header_values), max_size=6),
                        st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), header_values), max_size=8),
                        st.lists(st.tuples(st.text(max_size=3), st.text(max_size=3).map(str.encode)), min_size=30,
                                 max_size=40))


@settings(max_examples=1000, deadline=None)
@given(headers=st.lists(any_headers, min_size=1, max_size=4), codec=st.sampled_from(sorted(COMPRESSION)))
def test_the_c_renderer_writes_any_headers_as_python_does(headers: list[list[tuple[str, bytes | None]]],
                                                          codec: str) -> None:
    """Byte for byte the Python page, and lossless: `header_list` holds every header in order whenever `headers`
    does not hold them exactly, and only then."""
    raw = _set_header(build_batch([ProducerRecord(b"v", None, h, timestamp_ms=1) for h in headers],
                                  compression=codec), 0, 0)
    got = _rendered("t", 1, 0, 0, len(headers), raw)
    assert got == _python("t", 1, 0, 0, len(headers), raw)
    _, body = got  # type: ignore[misc]
    shown = json.loads(b"[" + body[len(Page.PREFIX) + len(b"{},"):] + b"]")
    for m, sent in zip(shown, headers, strict=True):
        exact = len({k for k, _ in sent}) == len(sent) and all(v is not None and reference(v)[1] == "utf-8"
                                                               for _, v in sent)
        if exact:
            assert "header_list" not in m and m["headers"] == {k: v.decode() for k, v in sent if v is not None}
        else:
            assert [(h["name"], None if h["value"] is None else base64.b64decode(h["value"])
                     if h["encoding"] == "base64" else h["value"].encode()) for h in m["header_list"]] == sent


@settings(max_examples=400, deadline=None)
@given(records=page_records, data=st.data())
def test_damaged_records_under_a_good_crc_are_refused_as_python_refuses_them(records: list[ProducerRecord],
                                                                            data: st.DataObject) -> None:
    """Bytes changed or cut inside the records (the CRC recomputed, as a buggy client would send them): the
    renderer refuses exactly what the decoder refuses (a RecordFormatError naming the batch), never crashes,
    and renders the rest the same."""
    good = bytearray(build_batch(records))
    if data.draw(st.booleans(), "cut"):
        cut = data.draw(st.integers(61, len(good) - 1), "at")
        good = good[:cut]
        struct.pack_into(">i", good, 8, len(good) - 12)
    else:
        at = data.draw(st.integers(61, len(good) - 1), "at")
        good[at] = data.draw(st.integers(0, 255), "byte")
    raw = _set_header(bytes(good), 0, 0)
    got = _rendered("t", 1, 0, 0, 100, raw)
    assert got == _python("t", 1, 0, 0, 100, raw)


def test_a_record_that_does_not_parse_names_its_batch() -> None:
    raw = bytearray(build_batch([ProducerRecord(b"v" * 20, b"key-1")]))
    raw[65] = 0x7E  # key length 63: runs past the record
    with pytest.raises(RecordFormatError, match=r"record batch at byte 0 \(base offset 0\): cannot decode records "
                                                r"\(record 0: key length 63 does not fit the record\)"):
        Page().renderer("t", 1, 0, 0, 10)(parse_header(bytes(raw)), _set_header(bytes(raw), 0, 0), 0)


def test_a_page_ends_before_a_damaged_object_as_the_decoded_read_does(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Two uploaded objects, the second damaged: the rendered page serves the first's messages and the offset
    after them, exactly as the decoded read (`fetch`) does; the next page raises the damage naming the object."""
    from broker.errors import ObjectFormatError
    from broker.node import BrokerNode
    from broker.partitions.client_messages import InMessage

    node = BrokerNode.open(tmp_path / "node", f"file://{tmp_path}/store", f"sqlite:///{tmp_path}/meta.sqlite",
                           upload_interval_s=3600.0, maintenance_interval_s=0)
    try:
        node.create_topic("t", 1)
        for part in ("first", "second"):
            node.produce("t", [InMessage(f"{part}-{i}".encode() * 50, key=b"k") for i in range(20)])
            node.flush()
        keys = [node.meta.object_key(o) for o in sorted(node.meta.committed_objects())]
        assert len(keys) == 2
        node.block_cache.__init__(node.block_cache.max_bytes)  # nothing cached: the page reads the store
        path = tmp_path / "store" / keys[1]
        raw = bytearray(path.read_bytes())
        raw[len(raw) // 3] ^= 0xFF  # inside a record batch of the second object
        path.write_bytes(bytes(raw))
        messages, next_offset = node.fetch("t", 0, 0, 100)
        page = Page()
        doc = json.loads(bytes(page.body(*node.fetch_rendered("t", 0, 0, 100, page.renderer))))
        assert doc["next_offset"] == next_offset == 20
        assert [m["offset"] for m in doc["messages"]] == [m.offset for m in messages] == list(range(20))
        with pytest.raises(ObjectFormatError) as err:
            node.fetch_rendered("t", 0, 20, 100, Page().renderer)
        assert err.value.key == keys[1]
    finally:
        node.close()
