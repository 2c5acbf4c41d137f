"""Bearer tokens with scopes: 401 without a valid token, 403 without the scope, /healthz always open."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient

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
