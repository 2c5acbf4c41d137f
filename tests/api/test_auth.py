"""Bearer tokens with scopes: 401 without a valid token, 403 without the scope, /healthz always open."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from starlette.requests import Request

TOKENS = {"reader": ["read"], "writer": ["produce"], "root": ["admin"]}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_scopes(make_client: Callable[..., TestClient]) -> None:
    c = make_client(TOKENS)
    assert c.get("/healthz").status_code == 200
    for headers in ({}, bearer("nope"), {"Authorization": "Basic cm9vdDo="}):
        r = c.get("/v1/topics", headers=headers)
        assert r.status_code == 401 and r.json()["field"] == "authorization"
    assert c.post("/v1/topics", json={"name": "t", "partitions": 1}, headers=bearer("reader")).status_code == 403
    assert c.post("/v1/topics", json={"name": "t", "partitions": 1}, headers=bearer("writer")).status_code == 403
    assert c.post("/v1/topics", json={"name": "t", "partitions": 1}, headers=bearer("root")).status_code == 201
    msg = {"messages": [{"key": "k", "value": "v"}]}
    assert c.post("/v1/topics/t/messages", json=msg, headers=bearer("reader")).status_code == 403
    r = c.post("/v1/topics/t/messages", json=msg, headers=bearer("writer"))
    assert r.status_code == 200
    msg_id = r.json()["results"][0]["msg_id"]
    assert c.get(f"/v1/messages/{msg_id}", headers=bearer("writer")).status_code == 403
    assert c.get(f"/v1/messages/{msg_id}", headers=bearer("reader")).status_code == 200
    assert c.get(f"/v1/messages/{msg_id}", headers=bearer("root")).status_code == 200
    assert c.get("/v1/messages", params={"topic": "t", "key": "k"}, headers=bearer("reader")).json()["messages"]


def test_no_tokens_means_open(make_client: Callable[..., TestClient]) -> None:
    c = make_client()
    assert c.post("/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201


def test_an_anonymous_request_is_refused_before_its_body_is_read(make_client: Callable[..., TestClient],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """FastAPI reads and parses a route's body before its scope dependency runs: without AuthenticateFirst an
    anonymous caller made the server read and parse up to the 32 MiB limit before its 401."""
    c = make_client(TOKENS)
    read: list[str] = []
    body = Request.body

    async def recorded(self: Request) -> bytes:
        read.append(self.url.path)
        return await body(self)

    monkeypatch.setattr(Request, "body", recorded)
    big = json.dumps([{} for _ in range(50_000)])
    for path in ("/v1/topics", "/v1/admin/reassignments", "/v1/admin/rebalance", "/v1/topics/t/messages"):
        for headers in ({}, bearer("nope")):
            r = c.post(path, content=big, headers={"content-type": "application/json", **headers})
            assert r.status_code == 401 and r.json() == {"error": "missing or unknown bearer token",
                                                         "field": "authorization"}
            assert r.headers["www-authenticate"] == "Bearer"
    r = c.patch("/v1/topics/t/configs", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 401
    assert read == [], f"bodies read before authentication: {read}"
    r = c.post("/v1/topics", json={"name": "t", "partitions": 1}, headers=bearer("root"))
    assert r.status_code == 201 and set(read) == {"/v1/topics"}  # a known token's request is read as before
