"""The exact sentence a client is told for each kind of bad field, from a real server: the field named once,
what it must be in plain words (no regular expression, no validator's wording), and what was sent."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.api.server import ServerProcess

TOPIC_RULE = "topic names are 1-249 characters of letters, digits, '.', '_' and '-' (not '.' or '..')"
CONFIG_RULE = "must be -1 (unlimited) or an integer from 1 to 9007199254740992"
BODY_RULE = "must be a JSON object, sent with content-type application/json"
PRODUCE_SHAPE = 'body must be {"messages": [{"key": ..., "value": ...}, ...]}'
MESSAGE_FIELDS = "a message's fields are key, key_encoding, value, headers, header_list, partition and encoding"
TOMBSTONE = "is required (null for a message without a value, a tombstone)"


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = ServerProcess(tmp_path_factory.mktemp("messages") / "data").start()
    try:
        assert httpx.post(f"{server.url}/v1/topics", json={"name": "t", "partitions": 2}).status_code == 201
        yield server.url
    finally:
        server.stop()


M = {"value": "v"}
CASES: list[tuple[str, str, Any, str, str]] = [
    # topic create: the name, the partitions, the configs
    ("POST", "/v1/topics", {"name": "has space"}, "name",
     f'name "has space" is not a valid topic name: {TOPIC_RULE}'),
    ("POST", "/v1/topics", {"name": "x" * 250}, "name",
     f'name "{"x" * 55}..." is not a valid topic name: {TOPIC_RULE}'),
    ("POST", "/v1/topics", {"name": 5}, "name", "name must be a string (got 5)"),
    ("POST", "/v1/topics", {"partitions": 1}, "name", "name is required"),
    ("POST", "/v1/topics", {"name": "a", "partitions": 0}, "partitions", "partitions must be at least 1 (got 0)"),
    ("POST", "/v1/topics", {"name": "a", "partitions": 10001}, "partitions",
     "partitions must be at most 10000 (got 10001)"),
    ("POST", "/v1/topics", {"name": "a", "partitions": "two"}, "partitions",
     'partitions must be an integer, not a string (got "two"): counts are JSON numbers; only topic config values '
     'may be given as strings'),
    ("POST", "/v1/topics", {"name": "a", "partitions": 1.5}, "partitions", "partitions must be an integer (got 1.5)"),
    ("POST", "/v1/topics", {"name": "a", "configs": {"retention.ms": 0}}, "configs.retention.ms",
     f"configs.retention.ms {CONFIG_RULE} (got 0)"),
    ("POST", "/v1/topics", {"name": "a", "configs": {"retention.ms": "1d"}}, "configs.retention.ms",
     f'configs.retention.ms {CONFIG_RULE} (got "1d"; as a string, an integer is its decimal digits: "1000", "-1")'),
    ("POST", "/v1/topics", {"name": "a", "configs": {"retention.bytes": 2**60}}, "configs.retention.bytes",
     f"configs.retention.bytes {CONFIG_RULE} (got {2**60})"),
    ("POST", "/v1/topics", {"name": "a", "configs": {"retention.ms": True}}, "configs.retention.ms",
     f"configs.retention.ms {CONFIG_RULE} (got a boolean)"),
    ("POST", "/v1/topics", {"name": "a", "configs": {"cleanup.policy": "compact"}}, "configs.cleanup.policy",
     "configs.cleanup.policy is not a supported config: the supported configs are retention.ms, retention.bytes "
     "and max.message.bytes"),
    ("POST", "/v1/topics", {"name": "a", "configs": {"max.message.bytes": -1}}, "configs.max.message.bytes",
     "configs.max.message.bytes must be an integer from 0 to 2147483647, bytes of a record batch (got -1)"),
    ("POST", "/v1/topics", {"name": "a", "configs": 5}, "configs", "configs must be a JSON object (got 5)"),
    ("POST", "/v1/topics", {"name": "a", "partiton": 4}, "partiton", "partiton is not a field of the body"),
    ("POST", "/v1/topics", {"name": "a", "replication_factor": 3}, "replication_factor",
     "replication_factor is not a field of the body"),
    ("POST", "/v1/topics", [1], "body", f"body {BODY_RULE}"),
    ("POST", "/v1/topics", b"", "body", f"body is required: it {BODY_RULE}"),
    ("POST", "/v1/topics", b"{bad", "body",
     "body is not valid JSON: expecting property name enclosed in double quotes at line 1 column 2"),
    ("POST", "/v1/topics", b'{"name":', "body", "body is not valid JSON: expecting value at line 1 column 9"),
    ("POST", "/v1/topics", b'{\n  "name": "a",\n}', "body",
     "body is not valid JSON: expecting property name enclosed in double quotes at line 3 column 1"),
    ("POST", "/v1/topics", b"\xff", "body", "body is not valid JSON: it is not UTF-8 text"),
    # config changes
    ("PATCH", "/v1/topics/t/configs", {"configs": {"retention.bytes": -2}}, "configs.retention.bytes",
     f"configs.retention.bytes {CONFIG_RULE} (got -2)"),
    ("PATCH", "/v1/topics/t/configs", {}, "configs", "configs is required"),
    ("PATCH", "/v1/topics/t/configs", {"configs": {"retention.ms": 5}, "extra": 1}, "extra",
     "extra is not a field of the body"),
    # produce
    ("POST", "/v1/topics/t/messages", {"messages": []}, "messages", "messages must hold at least 1 item (got 0)"),
    ("POST", "/v1/topics/t/messages", {"messages": [M] * 1001}, "messages",
     "messages must hold at most 1000 items (got 1001)"),
    ("POST", "/v1/topics/t/messages", {"messages": "v"}, "messages", 'messages must be a JSON array (got "v")'),
    ("POST", "/v1/topics/t/messages", {}, "body", f"{PRODUCE_SHAPE} (got an empty object)"),
    # a bare message instead of {"messages": [...]}, an array of them, a field beside messages
    ("POST", "/v1/topics/t/messages", {"value": "x"}, "body", f'{PRODUCE_SHAPE} (got an object of "value")'),
    ("POST", "/v1/topics/t/messages", {"key": "k", "value": "x"}, "body",
     f'{PRODUCE_SHAPE} (got an object of "key" and "value")'),
    ("POST", "/v1/topics/t/messages", [M], "body", f"{PRODUCE_SHAPE} (got an array)"),
    ("POST", "/v1/topics/t/messages", {"messages": [M], "topic": "t"}, "topic",
     f'body has an unknown field "topic": {PRODUCE_SHAPE}'),
    # a field a message does not have, anywhere in the body: the whole request refused
    ("POST", "/v1/topics/t/messages", {"messages": [{"value": "x", "bogus": 1}]}, "messages.0.bogus",
     f'messages.0 has an unknown field "bogus": {MESSAGE_FIELDS}'),
    ("POST", "/v1/topics/t/messages", {"messages": [{"vaule": "x"}]}, "messages.0.vaule",
     f'messages.0 has an unknown field "vaule" (did you mean "value"?): {MESSAGE_FIELDS}'),
    ("POST", "/v1/topics/t/messages", {"messages": [M, M, {"key": "k", "Value": "x"}]}, "messages.2.Value",
     f'messages.2 has an unknown field "Value" (did you mean "value"?): {MESSAGE_FIELDS}'),
    ("POST", "/v1/topics/t/messages", {"messages": [{"value": "x", "header": {"h": "1"}}]}, "messages.0.header",
     f'messages.0 has an unknown field "header" (did you mean "headers"?): {MESSAGE_FIELDS}'),
    # no value: {} is refused (a tombstone says "value": null)
    ("POST", "/v1/topics/t/messages", {"messages": [{}]}, "messages.0.value", f"messages.0.value {TOMBSTONE}"),
    ("POST", "/v1/topics/t/messages", {"messages": [M, {"key": "k"}]}, "messages.1.value",
     f"messages.1.value {TOMBSTONE}"),
    ("POST", "/v1/topics/t/messages", {"messages": [M, {"value": 1}]}, "messages.1.value",
     "messages.1.value must be a string (got 1)"),
    ("POST", "/v1/topics/t/messages", {"messages": [{"key": ["k"]}]}, "messages.0.key",
     "messages.0.key must be a string (got an array)"),
    ("POST", "/v1/topics/t/messages", {"messages": [{"value": "v", "headers": {"h": 1}}]}, "messages.0.headers.h",
     "messages.0.headers.h must be a string (got 1)"),
    ("POST", "/v1/topics/t/messages", {"messages": [{"value": "v", "headers": []}]}, "messages.0.headers",
     "messages.0.headers must be a JSON object (got an array)"),
    ("POST", "/v1/topics/t/messages", {"messages": [{"value": "v", "partition": -1}]}, "messages.0.partition",
     "messages.0.partition must be at least 0 (got -1)"),
    ("POST", "/v1/topics/t/messages", {"messages": [{"value": "v", "encoding": "rot13"}]}, "messages.0.encoding",
     "messages.0.encoding must be 'utf-8' or 'base64' (got \"rot13\")"),
    ("POST", "/v1/topics/t/messages", {"messages": [{"value": "%%", "encoding": "base64"}]}, "messages.0.value",
     "messages.0.value is not valid base64 (standard alphabet, with its = padding)"),
    ("POST", "/v1/topics/t/messages", b'{"messages": [{"value": "a\\udfffb"}]}', "messages.0.value",
     "messages.0.value is not valid text: surrogates not allowed at character 1"),
    ("POST", "/v1/topics/t/messages", b'{"messages": [{"value": "v", "headers": {"\\udc00": "x"}}]}',
     "messages.0.headers",
     "messages.0.headers has a name that is not valid text: surrogates not allowed at character 0"),
    ("POST", "/v1/topics/t/messages", {"messages": [None]}, "messages.0",
     "messages.0 must be a JSON object (got null)"),
    ("POST", "/v1/topics/t/messages", [1], "body", f"{PRODUCE_SHAPE} (got an array)"),
    ("POST", "/v1/topics/t/messages", 5, "body", f"{PRODUCE_SHAPE} (got 5)"),
    # JSON errors: the same sentences as the other routes' (above)
    ("POST", "/v1/topics/t/messages", b"{bad", "body",
     "body is not valid JSON: expecting property name enclosed in double quotes at line 1 column 2"),
    ("POST", "/v1/topics/t/messages", b'{"messages":', "body",
     "body is not valid JSON: expecting value at line 1 column 13"),
    ("POST", "/v1/topics/t/messages", b'{\n  "messages": [{"value": "x"},]\n}', "body",
     "body is not valid JSON: expecting value at line 2 column 31"),
    ("POST", "/v1/topics/t/messages", b"\xff", "body", "body is not valid JSON: it is not UTF-8 text"),
    ("POST", "/v1/topics/t/messages", b'{"messages": [{"value": "\xff"}]}', "body",
     "body is not valid JSON: it is not UTF-8 text"),
    ("POST", "/v1/topics/bad%20name/messages", {"messages": [M]}, "topic",
     f'topic "bad name" is not a valid topic name: {TOPIC_RULE}'),
    # admin bodies
    ("POST", "/v1/admin/reassignments", {"topic": "t", "partition": -1, "to": 0}, "partition",
     "partition must be at least 0 (got -1)"),
    ("POST", "/v1/admin/reassignments", {"topic": "t!", "partition": 0, "to": 0}, "topic",
     f'topic "t!" is not a valid topic name: {TOPIC_RULE}'),
    ("POST", "/v1/admin/reassignments", {"topic": "..", "partition": 0, "to": 0}, "topic",
     f'topic ".." is not a valid topic name: {TOPIC_RULE}'),
    ("POST", "/v1/topics", {"name": "."}, "name", f'name "." is not a valid topic name: {TOPIC_RULE}'),
    ("POST", "/v1/admin/reassignments", {"topic": "t", "partition": 0, "to": 2**31}, "to",
     "to must be less than 2147483648 (got 2147483648)"),
    ("POST", "/v1/admin/reassignments", {"topic": "t", "partition": 0}, "to", "to is required"),
    ("POST", "/v1/admin/rebalance", {"execute": "maybe"}, "execute", 'execute must be true or false (got "maybe")'),
    ("POST", "/v1/admin/index/roll?hold_upload_s=-1", None, "hold_upload_s",
     "hold_upload_s must be at least 0 (got -1)"),
    # queries and paths
    ("GET", "/v1/messages?topic=t", None, "key", "key is required"),
    ("GET", "/v1/messages?topic=t!&key=k", None, "topic", f'topic "t!" is not a valid topic name: {TOPIC_RULE}'),
    ("GET", "/v1/messages?topic=t&key=", None, "key", "key must not be empty"),
    ("GET", "/v1/messages?topic=t&key=k&max=0", None, "max", "max must be at least 1 (got 0)"),
    ("GET", "/v1/messages?topic=t&key=k&max=5000", None, "max", "max must be at most 1000 (got 5000)"),
    ("GET", "/v1/messages?topic=t&key=k&max=many", None, "max", "max must be an integer (got many)"),
    ("GET", "/v1/messages?topic=t&key=k&cursor=!!", None, "cursor",
     'cursor "!!" is not a cursor: pass the next_cursor of the previous page'),
    ("GET", "/v1/topics/t/partitions/x/messages", None, "partition", "partition must be an integer (got x)"),
    ("GET", "/v1/topics/t/partitions/0/messages?offset=-1", None, "offset", "offset must be at least 0 (got -1)"),
    ("GET", "/v1/messages/zz", None, "msg_id", 'msg_id "zz" is not a message id: ids are 32 hex digits, as produce '
                                               "answers them"),
]


@pytest.mark.parametrize("method, path, body, field, error", CASES,
                         ids=[f"{c[0]} {c[1]} {c[3]} {i}" for i, c in enumerate(CASES)])
def test_the_sentence_a_client_is_told(url: str, method: str, path: str, body: Any, field: str, error: str) -> None:
    if isinstance(body, bytes):
        kw: dict[str, Any] = {"content": body, "headers": {"content-type": "application/json"}}
    else:
        kw = {} if body is None else {"json": body}
    r = httpx.request(method, url + path, timeout=60, **kw)
    assert r.status_code == 400, r.text
    assert r.json() == {"error": error, "field": field}


def test_nothing_was_stored(url: str) -> None:
    """After every refused request above (the module's server): t is as created, with no message."""
    assert [t["name"] for t in httpx.get(f"{url}/v1/topics", timeout=60).json()] == ["t"]
    for p in range(2):
        assert httpx.get(f"{url}/v1/topics/t/partitions/{p}/messages", timeout=60).json()["messages"] == []
    assert all(c["source"] == "default" for c in httpx.get(f"{url}/v1/topics/t", timeout=60).json()["configs"].values())
