"""POST/GET /v1/admin/compaction (admin scope) and the compaction figures on /metrics."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient

TOKENS = {"reader": ["read"], "writer": ["produce"], "root": ["admin"]}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_admin_compaction_and_metrics(make_client: Callable[..., TestClient]) -> None:
    c = make_client(TOKENS)
    assert c.post("/v1/topics", json={"name": "t", "partitions": 2}, headers=bearer("root")).status_code == 201
    backend = c.app.state.backend  # type: ignore[attr-defined]
    for i in range(3):
        msg = {"messages": [{"key": f"k{i}", "value": "v", "partition": p} for p in range(2)]}
        assert c.post("/v1/topics/t/messages", json=msg, headers=bearer("writer")).status_code == 200
        backend.flush()
    for tok in ("reader", "writer"):
        assert c.post("/v1/admin/compaction", headers=bearer(tok)).status_code == 403
    assert c.post("/v1/admin/compaction").status_code == 401
    r = c.post("/v1/admin/compaction", headers=bearer("root"))
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["errors"] == [] and out["objects_in"] >= 3 and out["stream_set_objects"] == 1
    totals = c.get("/v1/admin/compaction", headers=bearer("root")).json()
    assert totals["runs"] == 1 and totals["objects_in"] == out["objects_in"]
    metrics = c.get("/metrics").text
    assert "mqindex_compaction_runs_total 1.0" in metrics
    assert 'mqindex_broker_objects{kind="stream_set_object"} 1.0' in metrics
    for k in ("k0", "k2"):
        assert c.get("/v1/messages", params={"topic": "t", "key": k}, headers=bearer("reader")).json()["messages"]
