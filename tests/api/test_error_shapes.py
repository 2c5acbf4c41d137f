"""Hostile input on every endpoint: no 5xx, every error in the {"error", "field"} shape, text that cannot be
stored refused naming the field with nothing stored, framework errors (unparsable body, 404, 405, 413) in
the same shape, and an OpenAPI document that says so."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import httpx
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.config import Settings
from api.http.app import app_for_node
from api.http.models import MAX_REQUEST_BYTES
from broker.node import BrokerNode


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    data: Path = tmp_path_factory.mktemp("shapes") / "data"
    s = Settings(data_dir=str(data)).resolved()
    node = BrokerNode.open(s.data_dir, s.store, s.metadata)
    node.create_topic("t", 2)
    # a server fault must come back as a response to check, not as an exception in the test
    c = TestClient(app_for_node(s, node), raise_server_exceptions=False)
    yield c
    c.close()
    node.close()


def stored(client: TestClient) -> int:
    return sum(len(client.get(f"/v1/topics/t/partitions/{p}/messages", params={"max": 1000}).json()["messages"])
               for p in range(2))


def check_shape(r: Any) -> None:
    assert r.status_code < 500, (r.status_code, r.text)
    if r.status_code >= 400:
        body = r.json()
        assert set(body) >= {"error", "field"} and isinstance(body["error"], str) and body["error"], body
        assert body["field"] is None or isinstance(body["field"], str)
        # a plain sentence: no validator's wording, no regular expression, no union member's tag. The client's
        # own text may be quoted back ('max must be an integer (got [a-z)'): only what the server adds counts.
        sent = sent_text(r)
        for leak in ("Input should", "String should", "Field required", "Value error", "[a-z", "{1,", "constrained",
                     "There was an error"):
            assert body["error"].count(leak) <= sent.count(leak), body


def sent_text(r: Any) -> str:
    """The URL (percent-decoded) and body of each request made (a redirect's too) as text: what an error may quote
    back to the client."""
    out = []
    for req in [h.request for h in r.history] + [r.request]:
        out.append(unquote(str(req.url), errors="replace"))
        try:
            out.append(req.content.decode(errors="replace"))
        except httpx.RequestNotRead:  # a redirected request's body is a stream, never sent again
            pass
    return "\n".join(out)


# unicode of every category, lone surrogates and control characters included
TEXT = st.text(st.characters(codec=None, categories=None), max_size=40)
SCALAR = st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() | TEXT
JSONISH = st.recursive(SCALAR, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
                       max_leaves=20)
MESSAGE = st.fixed_dictionaries({}, optional={"key": JSONISH | TEXT, "value": JSONISH | TEXT,
                                              "headers": JSONISH | st.dictionaries(TEXT, TEXT | JSONISH, max_size=3),
                                              "partition": JSONISH, "encoding": JSONISH | st.sampled_from(
                                                  ["utf-8", "base64"])})
PRODUCE = JSONISH | st.fixed_dictionaries({"messages": st.lists(MESSAGE, min_size=1, max_size=3) | JSONISH})
TOPIC = JSONISH | st.fixed_dictionaries({"name": JSONISH | TEXT}, optional={"partitions": JSONISH})
QUERY_VALUE = TEXT | st.integers(min_value=-(2**70), max_value=2**70).map(str)

RUNS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)


def dumps(body: Any) -> str:
    return json.dumps(body)  # ensure_ascii: a lone surrogate travels as "\\ud800", as a hostile client sends it


@RUNS
@given(body=PRODUCE)
def test_produce_bodies(client: TestClient, body: Any) -> None:
    check_shape(client.post("/v1/topics/t/messages", content=dumps(body),
                            headers={"content-type": "application/json"}))


@RUNS
@given(body=TOPIC)
def test_topic_bodies(client: TestClient, body: Any) -> None:
    check_shape(client.post("/v1/topics", content=dumps(body), headers={"content-type": "application/json"}))


@RUNS
@given(params=st.dictionaries(st.sampled_from(["topic", "key", "begin", "end", "max", "cursor"]), QUERY_VALUE))
def test_lookup_queries(client: TestClient, params: dict[str, str]) -> None:
    check_shape(client.get(f"/v1/messages?{query(params)}"))


@RUNS
@given(params=st.dictionaries(st.sampled_from(["offset", "max"]), QUERY_VALUE), partition=QUERY_VALUE,
       topic=TEXT, msg_id=TEXT)
def test_paths_and_fetch_queries(client: TestClient, params: dict[str, str], partition: str, topic: str,
                                 msg_id: str) -> None:
    part = segment(partition)
    check_shape(client.get(f"/v1/topics/{segment(topic)}/partitions/{part}/messages?{query(params)}"))
    check_shape(client.get(f"/v1/topics/t/partitions/{part}/messages?{query(params)}"))
    check_shape(client.get(f"/v1/messages/{segment(msg_id)}"))


def query(params: dict[str, str]) -> str:
    """A query string as a hostile client sends it: every value's bytes percent-encoded, lone surrogates
    included (a client library would refuse to encode those; the server must still answer in shape)."""
    return "&".join(f"{k}={quote(v.encode('utf-8', 'surrogatepass'), safe='')}" for k, v in params.items())


def segment(text: str) -> str:
    """A path segment as a hostile client sends it: every byte percent-encoded, lone surrogates included."""
    return quote(text.encode("utf-8", "surrogatepass"), safe="") or "x"


@RUNS
@given(raw=st.binary(max_size=200))
def test_unparsable_bodies(client: TestClient, raw: bytes) -> None:
    for path in ("/v1/topics", "/v1/topics/t/messages"):
        check_shape(client.post(path, content=raw, headers={"content-type": "application/json"}))


@pytest.mark.parametrize("message, field", [
    ({"key": "\ud800", "value": "v"}, "messages.0.key"),
    ({"value": "a\udfffb"}, "messages.0.value"),
    ({"value": "v", "headers": {"h": "\ud834"}}, "messages.0.headers.h"),
    ({"value": "v", "headers": {"\udc00": "x"}}, "messages.0.headers"),
])
def test_unencodable_text_is_a_400_naming_the_field_and_nothing_is_stored(client: TestClient,
                                                                          message: dict[str, Any],
                                                                          field: str) -> None:
    before = stored(client)
    r = client.post("/v1/topics/t/messages", content=dumps({"messages": [{"value": "ok"}, message]}),
                    headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["field"].startswith(field.replace("messages.0", "messages.1")), r.json()
    assert stored(client) == before


def test_framework_errors_have_the_shape(client: TestClient) -> None:
    r = client.post("/v1/topics/t/messages", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["field"] == "body", r.text
    r = client.get("/v1/no/such/route")
    assert r.status_code == 404 and r.json() == {"error": "Not Found", "field": None}
    r = client.delete("/v1/topics")
    assert r.status_code == 405 and r.json() == {"error": "Method Not Allowed", "field": None}
    r = client.post("/v1/topics/t/messages", content=b" " * (MAX_REQUEST_BYTES + 1),
                    headers={"content-type": "application/json"})
    assert r.status_code == 413 and set(r.json()) == {"error", "field"}, r.text


def test_openapi_documents_the_error_shapes(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    for path, item in doc["paths"].items():
        for method, op in item.items():
            responses = op["responses"]
            assert "422" not in responses, (method, path)
            for status in ("400", "404", "405", "413", "500"):
                assert responses[status]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorOut")
            assert responses["502"]["content"]["application/json"]["schema"]["$ref"].endswith("/DamageOut")
    assert {"object", "check", "error", "field"} <= set(doc["components"]["schemas"]["DamageOut"]["properties"])
    assert "unreadable" in doc["components"]["schemas"]["LookupOut"]["properties"]
