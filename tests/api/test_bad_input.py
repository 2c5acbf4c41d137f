"""Bad input gets a 4xx with a JSON error naming the field, and stores nothing."""

from __future__ import annotations

import base64

import pytest
from fastapi.testclient import TestClient

from api.http.models import MAX_VALUE_BYTES


def make_topic(client: TestClient, name: str = "t", partitions: int = 2) -> None:
    assert client.post("/v1/topics", json={"name": name, "partitions": partitions}).status_code == 201


def stored(client: TestClient, topic: str = "t", partitions: int = 2) -> int:
    total = 0
    for p in range(partitions):
        r = client.get(f"/v1/topics/{topic}/partitions/{p}/messages", params={"offset": 0, "max": 1000})
        assert r.status_code == 200
        total += len(r.json()["messages"])
    return total


def assert_error(r, status: int, field: str | None) -> None:  # type: ignore[no-untyped-def]
    assert r.status_code == status, r.text
    body = r.json()
    assert isinstance(body["error"], str) and body["error"]
    if field is not None:
        assert body["field"] == field, body


def test_topics(client: TestClient) -> None:
    make_topic(client, "orders", 3)
    assert_error(client.post("/v1/topics", json={"name": "orders", "partitions": 1}), 409, "name")
    for bad in ["", "has space", "slash/no", "x" * 250, "ünïcode"]:
        assert_error(client.post("/v1/topics", json={"name": bad, "partitions": 1}), 400, "name")
    assert_error(client.post("/v1/topics", json={"name": "ok", "partitions": 0}), 400, "partitions")
    assert_error(client.post("/v1/topics", json={"partitions": 1}), 400, "name")
    names = [t["name"] for t in client.get("/v1/topics").json()]
    assert names == ["orders"]


def test_produce_bad_input_stores_nothing(client: TestClient) -> None:
    make_topic(client)
    ok = {"key": "a", "value": "fine"}
    cases = [
        ({"messages": [ok, {"value": "%%%", "encoding": "base64"}]}, 400, "messages.1.value"),
        ({"messages": [ok, {"value": "x", "encoding": "rot13"}]}, 400, "messages.1.encoding"),
        ({"messages": [ok, {"value": "x", "partition": -1}]}, 400, "messages.1.partition"),
        ({"messages": [ok, {"value": "x", "partition": 7}]}, 404, "messages.1.partition"),
        ({"messages": []}, 400, "messages"),
        ({"messages": [ok, {"value": "x", "headers": {"h": 1}}]}, 400, "messages.1.headers.h"),
        ({"messages": [ok, {"value": base64.b64encode(b"x" * (MAX_VALUE_BYTES + 1)).decode(),
                            "encoding": "base64"}]}, 413, "messages.1.value"),
    ]
    for body, status, field in cases:
        assert_error(client.post("/v1/topics/t/messages", json=body), status, field)
    assert_error(client.post("/v1/topics/nope/messages", json={"messages": [ok]}), 404, "topic")
    assert stored(client) == 0
    # and a good request still works after all that
    r = client.post("/v1/topics/t/messages", json={"messages": [ok, {"value": base64.b64encode(b"\x00\xff").decode(),
                                                                       "encoding": "base64"}]})
    assert r.status_code == 200 and stored(client) == 2


def test_read_bad_input(client: TestClient) -> None:
    make_topic(client)
    assert_error(client.get("/v1/topics/t/partitions/0/messages", params={"offset": -1}), 400, "offset")
    assert_error(client.get("/v1/topics/t/partitions/0/messages", params={"max": 1001}), 400, "max")
    assert_error(client.get("/v1/topics/t/partitions/9/messages"), 404, "partition")
    assert_error(client.get("/v1/topics/zz/partitions/0/messages"), 404, "topic")
    assert_error(client.get("/v1/messages", params={"topic": "t", "key": "k", "begin": 10, "end": 5}), 400, "begin")
    assert_error(client.get("/v1/messages", params={"topic": "t", "key": "k", "max": 1001}), 400, "max")
    assert_error(client.get("/v1/messages", params={"topic": "t"}), 400, "key")
    assert_error(client.get("/v1/messages", params={"topic": "zz", "key": "k"}), 404, "topic")
    assert_error(client.get("/v1/messages", params={"topic": "t", "key": "k", "cursor": "garbage!"}), 400, "cursor")
    for bad in ["xyz", "0" * 31, "g" * 32]:
        assert_error(client.get(f"/v1/messages/{bad}"), 400, "msg_id")
    assert_error(client.get("/v1/messages/" + "0" * 32), 404, "msg_id")


def test_binary_values_round_trip_as_base64(client: TestClient) -> None:
    make_topic(client, partitions=1)
    raw = bytes(range(256))
    r = client.post("/v1/topics/t/messages", json={"messages": [{"key": "bin", "value": base64.b64encode(raw).decode(),
                                                                 "encoding": "base64"}]})
    msg_id = r.json()["results"][0]["msg_id"]
    got = client.get(f"/v1/messages/{msg_id}").json()
    assert got["encoding"] == "base64" and base64.b64decode(got["value"]) == raw


@pytest.mark.parametrize("path", ["/v1/topics", "/v1/index/files"])
def test_reads_answer_json(client: TestClient, path: str) -> None:
    assert client.get(path).status_code == 200
