"""The access control rules across a 3-node cluster (PostgreSQL metadata, SeaweedFS): a rule added through one
node is enforced by the others within a second, and a key lookup through any node (which asks the other nodes
with the cluster token) returns the messages of a topic the caller may read and answers 403 for one it may not;
the recorded moves and failovers name only the topics the caller may describe."""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.security.tokens import fingerprint
from storage_tier.seaweedfs_server import SeaweedFS
from tests.cluster.harness import Cluster

ADMIN, READER, CLUSTER = "admin-token-0123456789abcdef", "reader-token-0123456789abcdef", "cluster-token-0123456789ab"
READER_PRINCIPAL = f"User:token-{fingerprint(READER)}"


@pytest.fixture
def cluster(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> Iterator[Cluster]:
    config = tmp_path / "mqindex.toml"
    config.write_text(f'cluster_token = "{CLUSTER}"\nsuperusers = ["token-{fingerprint(ADMIN)}"]\n'
                      f'[tokens]\n"{ADMIN}" = ["admin"]\n"{READER}" = ["read"]\n"{CLUSTER}" = ["admin"]\n')
    c = Cluster(tmp_path, seaweedfs.store_url("mqindex", f"acl-{uuid.uuid4().hex[:8]}"), pg_url(),
                "--config", str(config))
    try:
        for i in range(3):
            c.start(i)
        yield c
    finally:
        c.stop_all()


def as_(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def produce(c: Cluster, topic: str, n: int) -> list[dict[str, Any]]:
    """n messages with key k0 spread over the topic's partitions (each sent to its leader, following 421s)."""
    acked = []
    for i in range(n):
        base = c.url(0)
        for _ in range(20):
            r = httpx.post(f"{base}/v1/topics/{topic}/messages", headers=as_(ADMIN), timeout=30,
                           json={"messages": [{"key": "k0", "value": f"{topic}-{i}", "partition": i % 3}]})
            if r.status_code == 421:
                base = r.json()["leader_url"]
                continue
            assert r.status_code == 200, r.text
            acked.append(r.json()["results"][0])
            break
    return acked


def test_rules_and_lookups_across_three_nodes(cluster: Cluster) -> None:
    for topic in ("team-a.orders", "team-b.orders"):
        r = httpx.post(f"{cluster.url(0)}/v1/topics", json={"name": topic, "partitions": 3}, headers=as_(ADMIN),
                       timeout=60)
        assert r.status_code == 201, r.text
        assert len(produce(cluster, topic, 6)) == 6
    r = httpx.post(f"{cluster.url(0)}/v1/admin/acls", headers=as_(ADMIN), timeout=30, json={"rules": [
        {"principal": READER_PRINCIPAL, "resource_type": "topic", "resource_name": "team-a.",
         "pattern_type": "prefixed", "operation": "read"}]})
    assert r.status_code == 201, r.text
    added = time.monotonic()

    def refused_on(node: int) -> bool:
        return httpx.get(f"{cluster.url(node)}/v1/messages", params={"topic": "team-b.orders", "key": "k0"},
                         headers=as_(READER), timeout=30).status_code == 403

    while not (refused_on(1) and refused_on(2)):
        assert time.monotonic() - added < 5, "the rule is not enforced by nodes 1 and 2"
        time.sleep(0.05)
    assert time.monotonic() - added < 1.5  # within a second (plus the requests' own time)
    for node in range(3):
        r = httpx.get(f"{cluster.url(node)}/v1/messages", params={"topic": "team-a.orders", "key": "k0", "max": 50},
                      headers=as_(READER), timeout=60)
        assert r.status_code == 200, r.text
        assert sorted(m["value"] for m in r.json()["messages"]) == sorted(f"team-a.orders-{i}" for i in range(6))
        r = httpx.get(f"{cluster.url(node)}/v1/messages", params={"topic": "team-b.orders", "key": "k0"},
                      headers=as_(READER), timeout=60)
        assert (r.status_code, r.json()) == (403, {"error": "not authorized", "field": "authorization"})
        names = [t["name"] for t in httpx.get(f"{cluster.url(node)}/v1/topics", headers=as_(READER)).json()]
        assert names == ["team-a.orders"]


def test_moves_and_failovers_name_only_topics_the_caller_may_describe(cluster: Cluster) -> None:
    for topic in ("team-a.orders", "team-b.orders"):
        r = httpx.post(f"{cluster.url(0)}/v1/topics", json={"name": topic, "partitions": 3}, headers=as_(ADMIN),
                       timeout=60)
        assert r.status_code == 201, r.text
    r = httpx.post(f"{cluster.url(0)}/v1/admin/acls", headers=as_(ADMIN), timeout=30, json={"rules": [
        {"principal": READER_PRINCIPAL, "resource_type": "topic", "resource_name": "team-a.",
         "pattern_type": "prefixed", "operation": "read"}]})
    assert r.status_code == 201, r.text

    def leaders() -> dict[str, int]:
        nodes = httpx.get(f"{cluster.url(0)}/v1/cluster/nodes", headers=as_(ADMIN), timeout=30).json()["nodes"]
        return {p: n["node_id"] for n in nodes if n["state"] == "alive" for p in n["partitions"]}

    deadline = time.monotonic() + 30
    while len(leaders()) < 6:
        assert time.monotonic() < deadline, f"not every partition led: {leaders()}"
        time.sleep(0.1)
    for topic in ("team-a.orders", "team-b.orders"):  # partition 0 of each moves to another node
        to = (leaders()[f"{topic}-0"] + 1) % 3
        r = httpx.post(f"{cluster.url(0)}/v1/admin/reassignments", headers=as_(ADMIN), timeout=120,
                       json={"topic": topic, "partition": 0, "to": to})
        assert r.status_code == 200, r.text
    # node 2 dies: a survivor fails it over, taking the partitions it led (of both topics)
    led_by_2 = sorted(p for p, n in leaders().items() if n == 2)
    assert {p.rsplit("-", 1)[0] for p in led_by_2} == {"team-a.orders", "team-b.orders"}, led_by_2
    cluster.nodes[2].stop(signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        reports = httpx.get(f"{cluster.url(0)}/v1/cluster/failovers", headers=as_(ADMIN), timeout=30).json()
        if any(f["node"] == 2 for f in reports["failovers"]):
            break
        assert time.monotonic() < deadline, "node 2 was never failed over"
        time.sleep(0.2)
    admin_taken = next(f for f in reports["failovers"] if f["node"] == 2)["partitions"]
    assert sorted(admin_taken) == led_by_2

    for node in (0, 1):
        moves = httpx.get(f"{cluster.url(node)}/v1/cluster/moves", headers=as_(READER), timeout=30).json()["moves"]
        assert moves and {m["topic"] for m in moves} == {"team-a.orders"}, moves
        every = httpx.get(f"{cluster.url(node)}/v1/cluster/moves", headers=as_(ADMIN), timeout=30).json()["moves"]
        assert {m["topic"] for m in every} == {"team-a.orders", "team-b.orders"}
        seen = httpx.get(f"{cluster.url(node)}/v1/cluster/failovers", headers=as_(READER), timeout=30).json()
        taken = next(f for f in seen["failovers"] if f["node"] == 2)["partitions"]
        assert sorted(taken) == [p for p in led_by_2 if p.startswith("team-a.")]
        assert "team-b" not in json.dumps(seen), seen  # in no field: committed ends, re-dispatch points, rescue
