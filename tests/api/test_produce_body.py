"""The HTTP produce body: parsed and validated in one pass, with the same answers as before for bodies that
are not JSON objects: a non-JSON media type, an empty body, invalid JSON, lone surrogates. Nothing is
stored for any of them; values round-trip byte for byte."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.config import Settings
from api.http.app import app_for_node
from api.http.plain_errors import plain
from broker.node import BrokerNode


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    data: Path = tmp_path_factory.mktemp("produce-body") / "data"
    s = Settings(data_dir=str(data)).resolved()
    node = BrokerNode.open(s.data_dir, s.store, s.metadata)
    node.create_topic("t", 1)
    c = TestClient(app_for_node(s, node))
    yield c
    c.close()
    node.close()


def end(client: TestClient) -> int:
    r = client.get("/v1/topics/t/partitions/0/messages", params={"offset": 0, "max": 1000})
    return int(r.json()["next_offset"])


@pytest.mark.parametrize("content, content_type, error", [
    (b'{"messages": [{"value": "x"}]}', "text/plain", "body must be a JSON object, sent with content-type "
                                                      "application/json"),
    (b'{"messages": [{"value": "x"}]}', None, "body must be a JSON object"),
    (b"", "application/json", "body is required"),
    (b'{"messages": [{"value": "x"}', "application/json", "not valid JSON"),
    (b'{"messages": []}', "application/json", "messages"),
    (b'{"messages": [{"value": "x", "partition": -1}]}', "application/json", "partition"),
])
def test_bodies_refused_with_a_400_and_nothing_stored(client: TestClient, content: bytes, content_type: str | None,
                                                      error: str) -> None:
    before = end(client)
    headers = {"content-type": content_type} if content_type else {}
    r = client.post("/v1/topics/t/messages", content=content, headers=headers)
    assert r.status_code == 400, r.text
    assert error in r.json()["error"], r.json()
    assert end(client) == before


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.text(max_size=50).filter(lambda t: all(not 0xD800 <= ord(c) <= 0xDFFF for c in t)),
                          st.one_of(st.none(), st.text(alphabet="abc", min_size=1, max_size=5))),
                min_size=1, max_size=20))
def test_values_and_keys_round_trip(client: TestClient, messages: list[tuple[str, str | None]]) -> None:
    body = {"messages": [{"value": v, "key": k} for v, k in messages]}
    r = client.post("/v1/topics/t/messages", content=json.dumps(body, ensure_ascii=False).encode(),
                    headers={"content-type": "application/json; charset=utf-8"})
    assert r.status_code == 200, r.text
    first = r.json()["results"][0]["offset"]
    got = client.get("/v1/topics/t/partitions/0/messages", params={"offset": first, "max": len(messages)}).json()
    assert [(m["value"], m["key"]) for m in got["messages"]] == messages


SHAPE = 'body must be {"messages": [{"key": ..., "value": ...}, ...]}'
FIELDS = "a message's fields are key, key_encoding, value, headers, header_list, partition and encoding"


@pytest.mark.parametrize("body, field, error", [
    # a misspelled or unknown field, after plain messages (which the fast path takes) or alone
    ({"messages": [{"value": "ok"}, {"vaule": "x"}]}, "messages.1.vaule",
     f'messages.1 has an unknown field "vaule" (did you mean "value"?): {FIELDS}'),
    ({"messages": [{"value": "x", "bogus": 1}]}, "messages.0.bogus",
     f'messages.0 has an unknown field "bogus": {FIELDS}'),
    ({"messages": [{"key": "k", "value": "x", "partiton": 0}]}, "messages.0.partiton",
     f'messages.0 has an unknown field "partiton" (did you mean "partition"?): {FIELDS}'),
    ({"messages": [{"value": "x"}], "partition": 0}, "partition", f'body has an unknown field "partition": {SHAPE}'),
    # no value at all: most likely a mistake (a tombstone says "value": null)
    ({"messages": [{}]}, "messages.0.value",
     "messages.0.value is required (null for a message without a value, a tombstone)"),
    ({"messages": [{"value": "ok"}, {"key": "k", "headers": {"h": "1"}}]}, "messages.1.value",
     "messages.1.value is required (null for a message without a value, a tombstone)"),
    # a bare message, or a list of them, instead of {"messages": [...]}
    ({"value": "x"}, "body", f'{SHAPE} (got an object of "value")'),
    ([{"value": "x"}], "body", f"{SHAPE} (got an array)"),
])
def test_a_body_with_a_mistake_is_refused_whole(client: TestClient, body: object, field: str, error: str) -> None:
    """The error names the field and the message; nothing of the request is stored, not even its plain
    messages before the one at fault."""
    before = end(client)
    r = client.post("/v1/topics/t/messages", content=json.dumps(body).encode(),
                    headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json() == {"error": error, "field": field}
    assert end(client) == before


def test_a_null_value_is_a_tombstone_and_stored(client: TestClient) -> None:
    r = client.post("/v1/topics/t/messages", json={"messages": [{"key": "k", "value": None}, {"value": None}]})
    assert r.status_code == 200, r.text
    first = r.json()["results"][0]["offset"]
    got = client.get("/v1/topics/t/partitions/0/messages", params={"offset": first, "max": 2}).json()["messages"]
    assert [(m["key"], m["value"]) for m in got] == [("k", None), (None, None)]


@pytest.mark.parametrize("content", [b"{bad", b'{"messages":', b'{"name": "a",}', b"[1,,]", b'{\n"a": 1\n"b": 2}',
                                     b"\xff", b'{"a": "\xc3"}', b"{\"a\": 'b'}"])
def test_json_errors_read_the_same_on_every_route(client: TestClient, content: bytes) -> None:
    """The produce route (which parses its own body) tells a body that is not JSON in the same words as a route
    whose body FastAPI parses: "body is not valid JSON: <reason>", the reason as the json module says it (its
    first word in lower case, a word in capitals kept), with the line and column."""
    before = end(client)
    headers = {"content-type": "application/json"}
    produce = client.post("/v1/topics/t/messages", content=content, headers=headers)
    topics = client.post("/v1/topics", content=content, headers=headers)
    assert produce.status_code == topics.status_code == 400, (produce.text, topics.text)
    assert produce.json() == topics.json()
    assert produce.json()["field"] == "body"
    assert produce.json()["error"].startswith("body is not valid JSON: ")
    assert end(client) == before


@pytest.mark.parametrize("reason, told", [
    ("Invalid JSON: EOF while parsing a value at line 1 column 9", "EOF while parsing a value at line 1 column 9"),
    ("Invalid JSON: JSON nested too deep", "JSON nested too deep"),
    ("Invalid JSON: Expected value at line 1 column 1", "expected value at line 1 column 1"),
    ("Invalid JSON: key must be a string at line 1 column 2", "key must be a string at line 1 column 2"),
])
def test_a_parsers_reason_keeps_its_capitals(reason: str, told: str) -> None:
    """pydantic's JSON errors (the message a client is told, api/http/plain_errors.py): only an ordinary first
    word is lower-cased ("eOF while parsing" was told before)."""
    error = {"type": "json_invalid", "loc": (), "msg": reason, "ctx": {"error": reason.removeprefix("Invalid JSON: ")}}
    assert plain(error) == (f"body is not valid JSON: {told}", "body")
