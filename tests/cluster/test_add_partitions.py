"""Partitions added to a topic of a three-node cluster (three `mqindex serve` processes on one PostgreSQL metadata
database and one SeaweedFS bucket), through a node: the new partitions are spread over the live nodes, each
served by its leader when the request returns, every node's view shows the new count, and records produced to
the new partitions through their leaders are found by key from every node beside the old ones."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from storage_tier.seaweedfs_server import SeaweedFS
from tests.cluster.harness import TOPIC, Cluster, all_by_key, started_with_topic, wait_until


@pytest.fixture
def cluster(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> Iterator[Cluster]:
    c = Cluster(tmp_path, seaweedfs.store_url("mqindex", f"grow-{uuid.uuid4().hex[:8]}"), pg_url(),
                "--upload-interval-s", "0.5")
    with started_with_topic(c, TOPIC, 3):
        yield c


def _produce(c: Cluster, partition: int, value: str) -> dict[str, object]:
    """One keyed message to `partition` through node 0, then through the leader it names (421)."""
    body = {"messages": [{"key": "k", "value": value, "partition": partition}]}
    r = httpx.post(f"{c.url(0)}/v1/topics/{TOPIC}/messages", json=body, timeout=30)
    if r.status_code == 421:
        r = httpx.post(f"{r.json()['leader_url']}/v1/topics/{TOPIC}/messages", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return dict(r.json()["results"][0])


def test_partitions_added_through_one_node_are_spread_and_served_by_all(cluster: Cluster) -> None:
    c = cluster
    old = [_produce(c, p, f"old-{p}") for p in range(3)]
    r = httpx.post(f"{c.url(1)}/v1/topics/{TOPIC}/partitions", json={"partitions": 6}, timeout=60)
    assert r.status_code == 200 and r.json()["partitions"] == 6, r.text

    led = {n: sorted(int(p.rsplit("-", 1)[1]) for p in ps if p.startswith(f"{TOPIC}-"))
           for n, ps in c.leaders().items()}
    assert sorted(p for ps in led.values() for p in ps) == list(range(6))
    assert all(len(ps) == 2 for ps in led.values()), led  # one new partition on each node
    wait_until(lambda: all(httpx.get(f"{c.url(n)}/v1/topics/{TOPIC}", timeout=10).json()["partitions"] == 6
                           for n in range(3)), 10, "every node sees 6 partitions")

    new = [_produce(c, p, f"new-{p}") for p in range(3, 6)]
    assert [(m["partition"], m["offset"]) for m in new] == [(3, 0), (4, 0), (5, 0)]
    want = sorted((int(m["partition"]), int(m["offset"])) for m in old + new)  # type: ignore[call-overload]
    for n in range(3):
        wait_until(lambda n=n: sorted((m["partition"], m["offset"]) for m in all_by_key(c.url(n), "k")) == want,
                   30, f"node {n} finds every record of key k")
