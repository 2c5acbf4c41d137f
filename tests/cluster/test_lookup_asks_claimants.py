"""A key lookup asks only the nodes that may hold entries of the topic not yet uploaded (those with an index claim
on one of its partitions), and none when none do; five real `mqindex serve` processes, the calls counted on each
node's /metrics (`mqindex_http_requests` of the internal index query route)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx

from storage_tier.seaweedfs_server import SeaweedFS
from tests.cluster.harness import Cluster

ROUTE = "/v1/internal/index/query"
NODES = 5


def internal_queries(c: Cluster, node: int) -> int:
    text = httpx.get(f"{c.url(node)}/metrics", timeout=10).text
    pattern = rf'^mqindex_http_requests_total{{[^}}]*route="{re.escape(ROUTE)}"[^}}]*}} ([0-9.e+]+)$'
    return int(sum(float(v) for v in re.findall(pattern, text, flags=re.M)))


def counts(c: Cluster) -> list[int]:
    return [internal_queries(c, n) for n in range(NODES)]


def lookup(c: Cluster, via: int, topic: str, key: str) -> list[dict[str, object]]:
    r = httpx.get(f"{c.url(via)}/v1/messages", params={"topic": topic, "key": key}, timeout=60)
    assert r.status_code == 200, r.text
    return list(r.json()["messages"])


def test_a_lookup_asks_only_the_node_with_unuploaded_entries_of_the_topic(
        tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> None:
    c = Cluster(tmp_path, seaweedfs.store_url("mqindex", f"claims-{uuid.uuid4().hex[:8]}"), pg_url())
    try:
        for i in range(NODES):
            c.start(i)
        for name in ("orders", "quiet"):
            r = httpx.post(f"{c.url(0)}/v1/topics", json={"name": name, "partitions": 1}, timeout=60)
            assert r.status_code == 201, r.text
        leader = next(n for n, ps in c.leaders().items() if "orders-0" in ps)
        r = httpx.post(f"{c.url(leader)}/v1/topics/orders/messages", timeout=60,
                       json={"messages": [{"key": "k1", "value": f"v{i}", "partition": 0} for i in range(3)]})
        assert r.status_code == 200, r.text

        # from every other node: the leader is asked once, nobody else; every message found
        for via in range(NODES):
            if via == leader:
                continue
            before = counts(c)
            assert sorted(m["value"] for m in lookup(c, via, "orders", "k1")) == ["v0", "v1", "v2"]
            after = counts(c)
            assert [a - b for a, b in zip(after, before, strict=True)] == \
                [1 if n == leader else 0 for n in range(NODES)], (via, leader, before, after)

        # from the leader itself, and for a topic no node holds entries of: no node is asked
        before = counts(c)
        assert len(lookup(c, leader, "orders", "k1")) == 3
        assert lookup(c, (leader + 1) % NODES, "quiet", "k1") == []
        assert counts(c) == before
    finally:
        c.stop_all()
