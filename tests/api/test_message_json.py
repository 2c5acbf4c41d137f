"""The orjson body of a whole-record read is the document FetchOut describes, for any stored message."""

from __future__ import annotations

import base64
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from api.http.message_json import fetch_body, text_or_base64
from api.http.models import FetchOut
from api.http.routes import message_out
from broker.partitions.client_messages import OutMessage

messages = st.builds(
    OutMessage,
    topic=st.from_regex(r"[a-z][a-z0-9._-]{0,20}", fullmatch=True),
    partition=st.integers(0, 2**31 - 1),
    offset=st.integers(0, 2**63 - 1),
    msg_id=st.from_regex(r"[0-9a-f]{32}", fullmatch=True),
    key=st.one_of(st.none(), st.binary(max_size=20), st.text(max_size=20).map(str.encode)),
    value=st.one_of(st.none(), st.binary(max_size=60), st.text(max_size=60).map(str.encode)),
    headers=st.lists(st.tuples(st.text(max_size=6), st.one_of(st.binary(max_size=10),
                                                             st.text(max_size=10).map(str.encode))), max_size=3),
    timestamp=st.integers(0, 2**53),
)


@settings(max_examples=150, deadline=None)
@given(ms=st.lists(messages, max_size=6), next_offset=st.integers(0, 2**63 - 1))
def test_fetch_body_is_the_fetch_out_document(ms: list[OutMessage], next_offset: int) -> None:
    body = fetch_body(ms, next_offset)
    model = FetchOut(messages=[message_out(m) for m in ms], next_offset=next_offset).model_dump(mode="json")
    assert json.loads(body) == model
    assert body == json.dumps(model, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


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
