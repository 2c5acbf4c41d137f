"""The orjson reading of plain produce bodies: the same messages pydantic's validation gives, and None (pydantic
validates, naming the field) for every body it does not take as is."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
message = st.fixed_dictionaries({}, optional={
    "key": st.none() | text, "value": st.none() | text, "headers": st.dictionaries(text, text, max_size=3),
    "partition": st.none() | st.integers(0, 2**31 - 1), "encoding": st.just("utf-8")})


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
    saved, produce_json._compiled = produce_json._compiled, None
    try:
        return produce_messages(raw)
    finally:
        produce_json._compiled = saved


json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False)
                           | text, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
                           max_leaves=6)
loose_message = st.one_of(
    json_values,
    st.dictionaries(st.sampled_from(["key", "value", "headers", "partition", "encoding", "other"]),
                    json_values | text | st.dictionaries(text, text | json_values, max_size=3)
                    | st.integers(-1, 2**31) | st.sampled_from(["utf-8", "base64"]), max_size=5),
    message)


@settings(max_examples=300, deadline=None)
@given(st.lists(loose_message, min_size=1, max_size=8))
def test_the_c_and_python_readers_agree_on_any_json(messages: list[Any]) -> None:
    raw = json.dumps({"messages": messages}).encode()
    assert produce_messages(raw) == _in_python(raw)


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
