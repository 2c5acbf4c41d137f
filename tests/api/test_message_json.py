"""The orjson body of a whole-record read is the document FetchOut describes, for any stored message."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from api.http.message_json import fetch_body
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
