"""The orjson reading of plain produce bodies: the same messages pydantic's validation gives, and None (pydantic
validates, naming the field) for every body it does not take as is."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from api.http import produce_json
from api.http.models import MAX_MESSAGES_PER_REQUEST, MAX_VALUE_BYTES, ProduceIn, decode_value
from api.http.produce_json import produce_messages, produced_answer
from broker.partitions.client_messages import InMessage, Produced


def by_pydantic(raw: bytes) -> list[InMessage]:
    body = ProduceIn.model_validate_json(raw)
    return [InMessage(value=decode_value(m.value, m.encoding, "value"),
                      key=m.key.encode() if m.key is not None else None,
                      headers=[(k, v.encode()) for k, v in m.headers.items()], partition=m.partition)
            for m in body.messages]


text = st.text(max_size=20).filter(lambda t: all(not 0xD800 <= ord(c) <= 0xDFFF for c in t))
message = st.fixed_dictionaries({"value": st.none() | text}, optional={
    "key": st.none() | text, "headers": st.dictionaries(text, text, max_size=3),
    "partition": st.none() | st.integers(0, 2**31 - 1), "encoding": st.just("utf-8")})
FIELDS = ("key", "value", "headers", "partition", "encoding")
#: names a message does not have: near misses of its fields, and any other text
unknown_name = st.sampled_from(["vaule", "Value", "keys", "header", "partitions", "", "messages", "value "]) \
    | text.filter(lambda t: t not in FIELDS)


@settings(max_examples=200, deadline=None)
@given(st.lists(message, min_size=1, max_size=20))
def test_plain_bodies_give_what_pydantic_gives(messages: list[dict[str, Any]]) -> None:
    raw = json.dumps({"messages": messages}).encode()
    assert produce_messages(raw) == by_pydantic(raw)


@pytest.mark.parametrize("body", [
    b'{"messages": [{"value": "x"}]',  # invalid JSON
    b'{"messages": [{"value": "\\ud800"}]}',  # a lone surrogate
    b'{"messages": []}',
    b'{"messages": [{"value": "x"}], "other": 1}',
    b'[{"value": "x"}]',
    b'{"messages": [{"value": "eA==", "encoding": "base64"}]}',
    b'{"messages": [{"value": 1}]}',
    b'{"messages": [{"key": ["k"]}]}',
    b'{"messages": [{"value": "x", "partition": -1}]}',
    b'{"messages": [{"value": "x", "partition": 1.0}]}',
    b'{"messages": [{"value": "x", "partition": true}]}',
    b'{"messages": [{"value": "x", "partition": "1"}]}',
    b'{"messages": [{"value": "x", "partition": 2147483648}]}',
    b'{"messages": [{"value": "x", "headers": null}]}',
    b'{"messages": [{"value": "x", "headers": {"h": 1}}]}',
    b'{"messages": [{"value": "x", "encoding": null}]}',
    b'{"messages": [{"value": "x", "extra": 1}]}',
    b'{"messages": [null]}',
    b'{"messages": [{}]}',  # no value: refused (null for a tombstone)
    b'{"messages": [{"key": "k"}]}',
    b'{"messages": [{"key": "k", "vaule": "x"}]}',  # a misspelled field
    b'{"messages": [{"value": "x"}, {"value": "y", "bogus": 1}]}',
    b'{"value": "x"}',  # a bare message
])
def test_other_bodies_are_left_to_pydantic(body: bytes) -> None:
    assert produce_messages(body) is None


def test_limits_are_left_to_pydantic() -> None:
    many = json.dumps({"messages": [{"value": "x"}] * (MAX_MESSAGES_PER_REQUEST + 1)}).encode()
    assert produce_messages(many) is None
    big = json.dumps({"messages": [{"value": "x" * (MAX_VALUE_BYTES + 1)}]}).encode()
    assert produce_messages(big) is None
    assert produce_messages(json.dumps({"messages": [{"value": "x" * MAX_VALUE_BYTES}]}).encode()) is not None


def test_the_c_message_reader_is_built() -> None:
    """`pip install` (make test) builds api/http/_produce_json; without it the messages are read in Python."""
    assert produce_json._compiled is not None


def _in_python(raw: bytes) -> list[InMessage] | None:
    saved = produce_json._compiled, produce_json._scan
    produce_json._compiled = produce_json._scan = None
    try:
        return produce_messages(raw)
    finally:
        produce_json._compiled, produce_json._scan = saved


json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False)
                           | text, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
                           max_leaves=6)
loose_message = st.one_of(
    json_values,
    st.dictionaries(st.sampled_from(["key", "value", "headers", "partition", "encoding", "other", "vaule", ""]),
                    json_values | text | st.dictionaries(text, text | json_values, max_size=3)
                    | st.integers(-1, 2**31) | st.sampled_from(["utf-8", "base64"]), max_size=5),
    message)


@settings(max_examples=300, deadline=None)
@given(st.lists(loose_message, min_size=1, max_size=8))
def test_the_c_and_python_readers_agree_on_any_json(messages: list[Any]) -> None:
    raw = json.dumps({"messages": messages}).encode()
    assert produce_messages(raw) == _in_python(raw)


@settings(max_examples=300, deadline=None)
@given(st.lists(loose_message, min_size=1, max_size=8))
def test_the_readers_never_take_what_pydantic_refuses(messages: list[Any]) -> None:
    """The fast readers (the scan, the C reader of orjson's objects, the Python one) give pydantic's messages or
    None; a body pydantic refuses (an unknown field, no value, ...) is never taken by any of them."""
    raw = json.dumps({"messages": messages}).encode()
    try:
        want: list[InMessage] | None = by_pydantic(raw)
    except ValidationError:
        want = None
    for got in (produce_messages(raw), produce_json.parsed_messages(raw), _in_python(raw)):
        assert got is None or got == want


@settings(max_examples=300, deadline=None)
@given(st.lists(message, min_size=1, max_size=8), st.data())
def test_a_message_with_an_unknown_field_refuses_the_body(messages: list[dict[str, Any]],
                                                          data: st.DataObject) -> None:
    """One plain message given a field it does not have (anywhere among its fields, written plainly or with
    escapes): no reader takes the body, and pydantic refuses it naming that message's field."""
    at = data.draw(st.integers(0, len(messages) - 1))
    name = data.draw(unknown_name)
    fields = list(messages[at].items())
    fields.insert(data.draw(st.integers(0, len(fields))), (name, data.draw(json_values | text)))
    messages[at] = dict(fields)
    raw = _json_text({"messages": messages}, data.draw, data.draw(st.booleans())).encode("utf-8", "surrogatepass")
    assert scanned(raw) is None
    assert produce_messages(raw) is None
    assert produce_json.parsed_messages(raw) is None
    assert _in_python(raw) is None
    with pytest.raises(ValidationError) as refused:
        ProduceIn.model_validate_json(raw)
    assert ("messages", at, name) in [e["loc"] for e in refused.value.errors() if e["type"] == "extra_forbidden"]


@settings(max_examples=200, deadline=None)
@given(st.lists(message, min_size=1, max_size=8), st.data())
def test_a_message_without_a_value_refuses_the_body(messages: list[dict[str, Any]], data: st.DataObject) -> None:
    """A message with no "value" ({} or key, headers, partition alone): no reader takes the body, pydantic
    refuses it naming messages.N.value; "value": null (a tombstone) is taken, as tested above."""
    at = data.draw(st.integers(0, len(messages) - 1))
    del messages[at]["value"]
    raw = _json_text({"messages": messages}, data.draw).encode()
    assert scanned(raw) is None
    assert produce_messages(raw) is None
    assert _in_python(raw) is None
    with pytest.raises(ValidationError) as refused:
        ProduceIn.model_validate_json(raw)
    assert [e["loc"] for e in refused.value.errors()] == [("messages", at, "value")]


ids = st.text(max_size=40) | st.text("0123456789abcdef", min_size=32, max_size=32)
ints = st.integers(-(2**63), 2**63 - 1) | st.integers(-(2**70), 2**70) | st.booleans()
produced = st.builds(Produced, ints, ints, ids, ints)


@settings(max_examples=300, deadline=None)
@given(st.lists(produced, max_size=20))
def test_the_answer_is_orjsons_document_byte_for_byte(results: list[Produced]) -> None:
    expected = {"results": [{"partition": p.partition, "offset": p.offset, "msg_id": p.msg_id,
                             "timestamp": p.timestamp} for p in results]}
    try:
        want = orjson.dumps(expected)
    except orjson.JSONEncodeError:  # integers beyond 64 bits: neither writer takes them
        with pytest.raises(orjson.JSONEncodeError):
            produced_answer(results)
        return
    assert produced_answer(results) == want
    assert json.loads(produced_answer(results)) == expected


def test_an_id_that_needs_escapes_is_left_to_orjson() -> None:
    assert produce_json._compiled is not None  # CI builds the module
    odd = [Produced(0, 0, 'needs "escape"', 0)]
    assert produce_json._compiled.produced_json(odd) is None
    assert json.loads(produced_answer(odd))["results"][0]["msg_id"] == 'needs "escape"'


# -- the body scan (api/http/_produce_scan): the same messages as orjson's reading, or None ------------------------

def test_the_body_scan_is_built() -> None:
    """`pip install` (make test) builds api/http/_produce_scan; without it every body goes through orjson."""
    assert produce_json._scan is not None


def scanned(raw: bytes) -> list[InMessage] | None:
    assert produce_json._scan is not None
    return produce_json._scan.messages(raw, MAX_VALUE_BYTES, produce_json.MAX_PARTITION, MAX_MESSAGES_PER_REQUEST)


_SHORT = {"\"": '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
          "\t": "\\t"}


def _json_string(s: str, draw: Any) -> str:
    """s as a JSON string, each character written as is where JSON allows it, or escaped (\\uXXXX, a surrogate
    pair beyond U+FFFF, or a short escape), as drawn."""
    out = ['"']
    for c in s:
        must = c in '"\\' or ord(c) < 0x20
        how = draw(st.sampled_from(["u", "short"] if must else ["plain", "plain", "u", "short"]))
        if how == "plain" and not must:
            out.append(c)
        elif how == "short" and c in _SHORT:
            out.append(_SHORT[c])
        elif ord(c) > 0xFFFF:
            hi, lo = divmod(ord(c) - 0x10000, 0x400)
            out.append(f"\\u{0xD800 + hi:04x}\\u{0xDC00 + lo:04X}")
        else:
            out.append(f"\\u{ord(c):04x}" if draw(st.booleans()) else f"\\u{ord(c):04X}")
    return "".join(out) + '"'


def _json_text(v: Any, draw: Any, names_escaped: bool = False) -> str:
    """v as JSON text with JSON's whitespace drawn between its tokens and its strings written as drawn. Field
    names and the encoding's "utf-8" are written plainly (the scan leaves escaped ones to orjson), but for the
    names of a "headers" object (or anywhere with names_escaped)."""
    def ws() -> str:
        return draw(st.sampled_from(["", "", " ", "\n", "\t", "\r\n ", "  "]))

    def name(k: str) -> str:
        return _json_string(k, draw) if names_escaped else json.dumps(k)

    if isinstance(v, dict):
        items = [f"{ws()}{name(k)}{ws()}:{ws()}"
                 + (json.dumps(x) if k == "encoding" and x == "utf-8" and not names_escaped
                    else _json_text(x, draw, names_escaped or k == "headers")) + ws() for k, x in v.items()]
        return "{" + ",".join(items) + (ws() if not items else "") + "}"
    if isinstance(v, list):
        return "[" + ",".join(f"{ws()}{_json_text(x, draw, names_escaped)}{ws()}" for x in v) \
            + (ws() if not v else "") + "]"
    if isinstance(v, str):
        return _json_string(v, draw)
    return json.dumps(v)


any_text = st.text(max_size=12)  # lone surrogates included: JSON can escape them, orjson refuses them


@settings(max_examples=400, deadline=None)
@given(st.lists(message, min_size=1, max_size=12), st.data())
def test_the_scan_reads_plain_bodies_however_they_are_written(messages: list[dict[str, Any]],
                                                              data: st.DataObject) -> None:
    """Any whitespace between tokens, any character escaped or not: the scan takes the body, with the messages
    orjson's reading (and pydantic) give."""
    raw = (data.draw(st.sampled_from(["", " ", "\n"])) + _json_text({"messages": messages}, data.draw)
           + data.draw(st.sampled_from(["", " ", "\r\n"]))).encode()
    got = scanned(raw)
    assert got is not None
    assert got == produce_json.parsed_messages(raw) == by_pydantic(raw)


@settings(max_examples=400, deadline=None)
@given(st.lists(message | message | loose_message | st.dictionaries(any_text, any_text, max_size=3), min_size=1,
               max_size=6), st.data())
def test_the_scan_never_answers_other_messages_than_orjson(messages: list[Any], data: st.DataObject) -> None:
    """Any JSON body, and the same body with bytes changed, inserted or cut: the scan gives orjson's reading of
    it or None (then orjson reads it), never other messages, and never takes what orjson refuses."""
    raw = bytearray(_json_text({"messages": messages}, data.draw, data.draw(st.booleans()))
                    .encode("utf-8", "surrogatepass"))
    for _ in range(data.draw(st.integers(0, 3))):
        at = data.draw(st.integers(0, len(raw)))
        byte = data.draw(st.sampled_from(b'"\\{}[],:0 un\x00\x1f\x80\xc3\xed\xf4\xff') | st.integers(0, 255))
        how = data.draw(st.sampled_from(["set", "insert", "cut"]))
        if how == "insert" or at == len(raw):
            raw[at:at] = bytes([byte])
        elif how == "set":
            raw[at] = byte
        else:
            del raw[at:at + data.draw(st.integers(1, 4))]
    got = scanned(bytes(raw))
    if got is not None:
        assert got == produce_json.parsed_messages(bytes(raw))


@pytest.mark.parametrize("body", [
    b'{"messages": [{"value": "\\ud800"}]}',  # a lone high surrogate
    b'{"messages": [{"value": "\\udc00x"}]}',  # a lone low surrogate
    b'{"messages": [{"value": "\\ud800\\u0041"}]}',  # a high surrogate and no low one
    b'{"messages": [{"value": "\xed\xa0\x80"}]}',  # a surrogate written in UTF-8
    b'{"messages": [{"value": "\xc0\xaf"}]}',  # an overlong sequence
    b'{"messages": [{"value": "\xf4\x90\x80\x80"}]}',  # past U+10FFFF
    b'{"messages": [{"value": "\xe2\x82"}]}',  # a sequence cut short
    b'{"messages": [{"value": "a\tb"}]}',  # a raw control character
    b'{"messages": [{"value": "\\x41"}]}',  # an unknown escape
    b'{"messages": [{"value": "\\u00g1"}]}',  # not hex
    b'{"messages": [{"value": "x", "value": "y"}]}',  # a field twice
    b'{"messages": [{"value": "x", "headers": {"h": "1", "h": "2"}}]}',  # a header twice
    b'{"messages": [{"value": "x", "partition": -0}]}',
    b'{"messages": [{"value": "x", "partition": 01}]}',
    b'{"messages": [{"value": "x", "partition": 1e2}]}',
    b'{"messages": [{"value": "x", "partition": 12345678901}]}',
    b'{"messages": [{"\\u0076alue": "x"}]}',  # an escaped field name
    b'{"messages": [{"value": "x", "encoding": "utf\\u002d8"}]}',
    b'\xef\xbb\xbf{"messages": [{"value": "x"}]}',  # a byte order mark
    b'{"messages": [{"value": "x"}]} x',
    b'{"messages": [{"value": "x"},]}',
    b'{"messages": [{"value": "x"}], "messages": [{"value": "y"}]}',
])
def test_bodies_the_scan_leaves_to_orjson(body: bytes) -> None:
    """Each gives None from the scan; produce_messages then answers what orjson's reading answers."""
    assert scanned(body) is None
    assert produce_messages(body) == produce_json.parsed_messages(body)


def test_the_scan_keeps_the_limits() -> None:
    many = json.dumps({"messages": [{"value": "x"}] * (MAX_MESSAGES_PER_REQUEST + 1)}).encode()
    assert scanned(many) is None
    assert scanned(json.dumps({"messages": [{"value": "x"}] * MAX_MESSAGES_PER_REQUEST}).encode()) is not None
    assert scanned(json.dumps({"messages": [{"value": "x" * (MAX_VALUE_BYTES + 1)}]}).encode()) is None
    exact = json.dumps({"messages": [{"value": "é" * (MAX_VALUE_BYTES // 2)}]}, ensure_ascii=False).encode()
    assert scanned(exact) == produce_json.parsed_messages(exact)
    top = json.dumps({"messages": [{"value": "x", "partition": 2**31 - 1}]}).encode()
    assert scanned(top) == produce_json.parsed_messages(top)
    assert scanned(json.dumps({"messages": [{"value": "x", "partition": 2**31}]}).encode()) is None
