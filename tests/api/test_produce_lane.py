"""The produce lane (api/http/produce_lane.py) changes no answer: every produce request, plain or not, allowed
or not, gets from an app with the lane what the same app without it gives; plain ones never reach the route."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.config import Settings
from api.http import routes
from api.http.app import app_for_node
from api.http.models import MAX_REQUEST_BYTES
from api.http.produce_lane import ProduceLane
from broker.node import BrokerNode

TOKENS = {"reader": ["read"], "writer": ["produce"], "root": ["admin"]}


class Pair:
    """Two apps over two nodes with the same topics, one with the lane and one without; the same requests
    in the same order to topic "t" give the same offsets on both."""

    def __init__(self, root: Path) -> None:
        self.nodes: list[BrokerNode] = []
        self.clients: list[TestClient] = []
        for name in ("lane", "route"):
            s = Settings(data_dir=str(root / name), tokens=TOKENS).resolved()
            node = BrokerNode.open(s.data_dir, s.store, s.metadata)
            app = app_for_node(s, node)
            if name == "route":
                app.user_middleware = [m for m in app.user_middleware if m.cls is not ProduceLane]
            client = TestClient(app)
            self.nodes.append(node)
            self.clients.append(client)
            for topic in ("t", "u"):  # "t" gets the same requests on both apps; "u" is for one app's tests
                r = client.post("/v1/topics", json={"name": topic, "partitions": 3}, headers=bearer("root"))
                assert r.status_code == 201, r.text

    def both(self, path: str, **kwargs: Any) -> tuple[httpx.Response, httpx.Response]:
        lane, route = (c.post(path, **kwargs) for c in self.clients)
        return lane, route

    def close(self) -> None:
        for c in self.clients:
            c.close()
        for n in self.nodes:
            n.close()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    p = Pair(tmp_path_factory.mktemp("lane"))
    yield p
    p.close()


_ID = re.compile(r'"msg_id":"[0-9a-f]{16}([0-9a-f]{16})"')
_TS = re.compile(r'"timestamp":\d+')


def same_answer(lane: httpx.Response, route: httpx.Response) -> None:
    assert lane.status_code == route.status_code, (lane.text, route.text)
    assert lane.headers.get("content-type") == route.headers.get("content-type")
    assert lane.headers.get("www-authenticate") == route.headers.get("www-authenticate")
    if lane.status_code == 200:
        # the ids' topic halves and the append times differ between the two nodes; the rest is the same bytes
        assert _TS.sub("", _ID.sub(r"\1", lane.text)) == _TS.sub("", _ID.sub(r"\1", route.text))
        assert json.loads(lane.text)["results"]
    else:
        assert lane.json() == route.json()


text = st.text(max_size=8)
plain_message = st.fixed_dictionaries({"value": st.none() | text}, optional={
    "key": st.none() | text, "headers": st.dictionaries(text, text, max_size=2),
    "partition": st.none() | st.integers(0, 3), "encoding": st.just("utf-8")})
odd_message = st.fixed_dictionaries({}, optional={  # refused ones too: no value, an unknown field
    "value": st.none() | text | st.integers(), "encoding": st.sampled_from(["utf-8", "base64", "latin-1"]),
    "partition": st.integers(-1, 2**31) | st.booleans(), "extra": st.integers(), "vaule": text})
body = st.one_of(
    st.builds(lambda ms: json.dumps({"messages": ms}).encode(), st.lists(plain_message, min_size=1, max_size=5)),
    st.builds(lambda ms: json.dumps({"messages": ms}).encode(), st.lists(odd_message, max_size=3)),
    st.sampled_from([b"", b"{", b"[]", b'{"messages": [{"value": "x"}], "more": 1}', b'{"messages": [{"value":'
                                                                                        b' "\\ud800"}]}']))
request = st.fixed_dictionaries({
    # weighted towards requests the lane answers itself
    "topic": st.sampled_from(["t", "t", "t", "missing", "bad topic!"]),
    "content_type": st.sampled_from(["application/json", "application/json", "application/vnd.x+json; charset=utf-8",
                                     "text/plain", None]),
    "token": st.sampled_from(["writer", "writer", "root", "reader", "unknown", None]),
    "body": body})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request)
def test_every_produce_request_gets_the_routes_answer(pair: Pair, req: dict[str, Any]) -> None:
    headers = bearer(req["token"]) if req["token"] else {}
    if req["content_type"]:
        headers["content-type"] = req["content_type"]
    same_answer(*pair.both(f"/v1/topics/{req['topic']}/messages", content=req["body"], headers=headers))


def test_a_streamed_body_over_the_limit_gets_the_routes_413(pair: Pair) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"messages": [{"value": "'
        for _ in range(MAX_REQUEST_BYTES // (1 << 20) + 1):
            yield b"x" * (1 << 20)
        yield b'"}]}'

    lane, route = (c.post("/v1/topics/t/messages", content=chunks(),
                          headers={"content-type": "application/json", **bearer("writer")}) for c in pair.clients)
    assert lane.status_code == 413
    same_answer(lane, route)


def test_a_produce_error_is_answered_by_the_apps_handlers(pair: Pair) -> None:
    plain = json.dumps({"messages": [{"value": "v", "partition": 7}]}).encode()  # the topic has 3 partitions
    lane, route = pair.both("/v1/topics/t/messages", content=plain,
                            headers={"content-type": "application/json", **bearer("writer")})
    assert lane.status_code == 404 and lane.json()["field"] == "messages.0.partition", lane.text
    same_answer(lane, route)


def test_plain_requests_never_reach_the_route(pair: Pair, monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(raw: bytes) -> None:
        raise AssertionError("the route read a plain body")

    monkeypatch.setattr(routes, "produce_messages", refused)
    lane = pair.clients[0]
    plain = {"messages": [{"key": "k", "value": "v"}, {"value": "w", "partition": 2}]}
    r = lane.post("/v1/topics/u/messages", json=plain, headers=bearer("writer"))
    assert r.status_code == 200 and [m["partition"] for m in r.json()["results"]][1] == 2
    got = lane.get(f"/v1/messages/{r.json()['results'][1]['msg_id']}", headers=bearer("reader"))
    assert got.status_code == 200 and got.json()["value"] == "w"
    # counted under the route's path, as the router would label it
    metrics = lane.get("/metrics").text
    assert 'mqindex_http_requests_total{route="/v1/topics/{topic}/messages",status="200"}' in metrics


def test_requests_for_other_routes_pass_by(make_client: Callable[..., TestClient]) -> None:
    c = make_client()
    assert c.post("/v1/topics", json={"name": "u", "partitions": 1}).status_code == 201
    assert c.post("/v1/topics/u/messages", json={"messages": [{"value": "v"}]}).status_code == 200
    page = c.get("/v1/topics/u/partitions/0/messages", params={"offset": 0})
    assert page.status_code == 200 and [m["value"] for m in page.json()["messages"]] == ["v"]
    for method in (c.get, c.put):  # the produce path with another method: the router's 405
        r = method("/v1/topics/u/messages")
        assert r.status_code == 405 and r.json()["error"]


def test_an_unexpected_error_reaches_the_server_as_from_the_route(pair: Pair,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(topic: str, messages: list[Any]) -> None:
        raise RuntimeError("broken on purpose")

    for node in pair.nodes:
        monkeypatch.setattr(node, "produce", broken)
    plain = json.dumps({"messages": [{"value": "v"}]}).encode()
    for client in pair.clients:  # the server-error middleware answers 500 and raises it on (TestClient re-raises)
        with pytest.raises(RuntimeError, match="broken on purpose"):
            client.post("/v1/topics/t/messages", content=plain,
                        headers={"content-type": "application/json", **bearer("writer")})
    for client in pair.clients:
        quiet = TestClient(client.app, raise_server_exceptions=False)
        r = quiet.post("/v1/topics/t/messages", content=plain,
                       headers={"content-type": "application/json", **bearer("writer")})
        assert r.status_code == 500 and r.json() == {"error": "internal error: RuntimeError", "field": None}
