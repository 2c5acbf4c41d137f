"""Deeply nested JSON in a request body: every route that reads a body answers a 400 in the {"error", "field"}
shape on the same connection, the server goes on serving, and nothing stored changes."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.config import Settings
from api.http.app import app_for_node
from broker.node import BrokerNode
from tests.api.server import ServerProcess

TOO_DEEP = {"error": "body is not valid JSON: its arrays and objects are nested too deeply", "field": "body"}
#: every route that reads a body, with its path filled in (the test checks the OpenAPI document lists no other)
BODY_ROUTES = [("POST", "/v1/topics/t/messages"), ("POST", "/v1/topics"), ("PATCH", "/v1/topics/t/configs"),
               ("POST", "/v1/topics/t/partitions"),
               ("POST", "/v1/admin/reassignments"), ("POST", "/v1/admin/rebalance"), ("POST", "/v1/groups/g/offsets"),
               ("POST", "/v1/admin/acls"), ("POST", "/v1/console/page"), ("POST", "/v1/searches")]
DEEP_BODIES = {
    "100,000 [": b"[" * 100_000,
    "closed arrays": b"[" * 50_000 + b"]" * 50_000,
    "objects": b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    "in messages": b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "in a value": b'{"messages": [{"value": ' + b"[" * 100_000 + b"]" * 100_000 + b"}]}",
    "in configs": b'{"name": "u", "configs": ' + b'{"retention.ms": ' * 50_000 + b"1" + b"}" * 50_001,
}


def body_routes(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method.upper(), path.replace("{topic}", "t").replace("{group}", "g"))
            for path, item in doc["paths"].items()
            for method, op in item.items() if isinstance(op, dict) and "requestBody" in op}


def stored_state(url: str) -> dict[str, Any]:
    """Topics, the configs of t and every message of t: what a refused request must leave as it was."""
    topics = httpx.get(f"{url}/v1/topics", timeout=60).json()
    detail = httpx.get(f"{url}/v1/topics/t", timeout=60).json()
    messages = [httpx.get(f"{url}/v1/topics/t/partitions/{p}/messages", params={"max": 1000}, timeout=60).json()
                for p in range(2)]
    return {"topics": topics, "t": detail, "messages": messages}


def test_deeply_nested_bodies_are_a_400_on_a_healthy_connection_and_store_nothing(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        url = server.url
        assert httpx.post(f"{url}/v1/topics", json={"name": "t", "partitions": 2,
                                                    "configs": {"retention.ms": 86_400_000}}).status_code == 201
        r = httpx.post(f"{url}/v1/topics/t/messages", json={"messages": [{"key": "k", "value": f"v{i}"}
                                                                         for i in range(5)]})
        assert r.status_code == 200, r.text
        assert body_routes(httpx.get(f"{url}/openapi.json").json()) == set(BODY_ROUTES)
        before = stored_state(url)

        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        try:
            conn.connect()
            sock = conn.sock
            for method, path in BODY_ROUTES:
                for name, body in DEEP_BODIES.items():
                    conn.request(method, path, body=body, headers={"content-type": "application/json"})
                    response = conn.getresponse()
                    answer = response.read()
                    assert response.status == 400, (method, path, name, response.status, answer[:300])
                    assert json.loads(answer) == TOO_DEEP, (method, path, name)
                    assert response.getheader("connection") != "close", (method, path, name)
                    assert conn.sock is sock, f"{method} {path} ({name}): the connection was closed"
            # the same connection goes on serving
            conn.request("GET", "/v1/topics")
            response = conn.getresponse()
            assert response.status == 200 and [t["name"] for t in json.loads(response.read())] == ["t"]
            assert conn.sock is sock
        finally:
            conn.close()
        assert server.proc is not None and server.proc.poll() is None
        assert stored_state(url) == before
        assert "unhandled error" not in server.log.read_text()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    data: Path = tmp_path_factory.mktemp("deep-json") / "data"
    s = Settings(data_dir=str(data)).resolved()
    node = BrokerNode.open(s.data_dir, s.store, s.metadata)
    node.create_topic("t", 2)
    c = TestClient(app_for_node(s, node), raise_server_exceptions=False)
    yield c
    c.close()
    node.close()


def nested(depth: int, openers: list[str], inner: str, closed: bool) -> str:
    """`depth` levels of arrays and objects (openers cycled) around `inner`, closed or cut off."""
    opened = [openers[i % len(openers)] for i in range(depth)]
    text = "".join("[" if o == "[" else '{"a": ' for o in opened) + inner
    return text + ("".join("]" if o == "[" else "}" for o in reversed(opened)) if closed else "")


# where in a body the nesting sits: the whole body, or a field of a body each route reads
PLACES = ["{}", '{{"messages": {}}}', '{{"messages": [{{"value": {}}}]}}', '{{"messages": [{{"headers": {}}}]}}',
          '{{"name": "n", "configs": {}}}', '{{"configs": {}}}', '{{"topic": "t", "partition": {}, "to": 0}}',
          '{{"execute": {}}}']


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(route=st.sampled_from(BODY_ROUTES), place=st.sampled_from(PLACES),
       depth=st.integers(min_value=1, max_value=3) | st.integers(min_value=1, max_value=200_000),
       openers=st.lists(st.sampled_from(["[", "{"]), min_size=1, max_size=3),
       inner=st.sampled_from(["1", '"x"', "null", "[]", "{}", ""]), closed=st.booleans())
def test_nested_bodies_are_refused_in_shape(client: TestClient, route: tuple[str, str], place: str, depth: int,
                                            openers: list[str], inner: str, closed: bool) -> None:
    """Any nesting anywhere in any body: never a 5xx, every error in the shape, the too-deep answer past every
    parser's depth limit, and no message stored."""
    before = sum(len(client.get(f"/v1/topics/t/partitions/{p}/messages").json()["messages"]) for p in range(2))
    body = place.format(nested(depth, openers, inner, closed)).encode()
    method, path = route
    r = client.request(method, path, content=body, headers={"content-type": "application/json"})
    assert r.status_code < 500, (r.status_code, r.text[:300])  # (a shallow rebalance body is a dry run: 200)
    answer = r.json()
    if r.status_code >= 400:
        assert set(answer) >= {"error", "field"} and isinstance(answer["error"], str) and answer["error"], answer
    if depth >= 10_000:
        assert (r.status_code, answer) == (400, TOO_DEEP)
    after = sum(len(client.get(f"/v1/topics/t/partitions/{p}/messages").json()["messages"]) for p in range(2))
    assert after == before
