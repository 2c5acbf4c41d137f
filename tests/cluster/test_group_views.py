"""Consumer group views on a 3-node cluster of real `mqindex serve` processes, each with a Kafka listener: a
confluent-kafka group consuming from partitions led by different nodes, and groups that only have committed
offsets, are listed and described the same from every node (a node forwards a describe to the group's
coordinator and gathers the list from every node), with the members, assignments and the lag the test counts;
the console's throughput history is gathered from every node the same way; a producer that knows one node makes
a topic nobody created, which every node then lists and answers lookups of."""

from __future__ import annotations

import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer

from storage_tier.seaweedfs_server import SeaweedFS
from tests.cluster.harness import Cluster, kafka_cluster, wait_until

TOPIC = "grouped"
PARTITIONS = 3
PER_PARTITION = 5


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, seaweedfs: SeaweedFS,
            pg_url: Callable[[], str]) -> Iterator[Cluster]:
    store = seaweedfs.store_url("mqindex", f"groups-{uuid.uuid4().hex[:8]}")
    with kafka_cluster(tmp_path_factory.mktemp("group-views"), store, pg_url(), 3) as c:
        yield c


def bootstrap(c: Cluster) -> str:
    return ",".join(f"127.0.0.1:{c.nodes[n].kafka_port}" for n in range(3))  # type: ignore[attr-defined]


def coordinated_by(node: int, prefix: str) -> str:
    """A group id whose coordinator is `node` (the rule of every node: crc32 of the id over the listeners)."""
    return next(g for i in range(1000) if zlib.crc32((g := f"{prefix}-{i}").encode()) % 3 == node)


def get(c: Cluster, node: int, path: str) -> Any:
    r = httpx.get(c.url(node) + path, timeout=30)
    assert r.status_code == 200, f"node {node} {path}: {r.status_code} {r.text}"
    return r.json()


def test_every_node_lists_and_describes_every_group(cluster: Cluster) -> None:
    c = cluster
    r = httpx.post(f"{c.url(0)}/v1/topics", json={"name": TOPIC, "partitions": PARTITIONS}, timeout=60)
    assert r.status_code == 201, r.text
    wait_until(lambda: sum(len(v) for v in c.leaders().values()) == PARTITIONS, 30, "every partition led")
    leaders = {int(p.rsplit("-", 1)[1]): n for n, ps in c.leaders().items() for p in ps if p.startswith(TOPIC)}
    assert len(set(leaders.values())) > 1, f"the partitions should be spread over the nodes: {leaders}"
    producer = Producer({"bootstrap.servers": bootstrap(c), "acks": "all"})
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            producer.produce(TOPIC, value=f"{p}-{i}".encode(), partition=p)
    assert producer.flush(60) == 0

    # a running group coordinated by node 2 reads 2 messages of each partition and commits
    running = coordinated_by(2, "running")
    consumer = Consumer({"bootstrap.servers": bootstrap(c), "group.id": running, "client.id": "reader",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 300})
    stopped = coordinated_by(1, "stopped")
    try:
        consumer.subscribe([TOPIC])
        taken: dict[int, int] = {}
        deadline = time.monotonic() + 60
        while sum(taken.values()) < 2 * PARTITIONS:
            assert time.monotonic() < deadline, f"consumed only {taken}"
            m = consumer.poll(0.2)
            if m is not None and m.error() is None and taken.get(m.partition(), 0) < 2:
                assert m.offset() == taken.get(m.partition(), 0)
                taken[m.partition()] = m.offset() + 1
                consumer.commit(message=m, asynchronous=False)
        # a stopped group (offsets only) coordinated by node 1, its offsets set from node 0 (forwarded)
        r = httpx.post(f"{c.url(0)}/v1/groups/{stopped}/offsets", timeout=30,
                       json={"to": "offset", "offset": 4, "topics": [TOPIC]})
        assert r.status_code == 200, r.text

        listed = [get(c, n, "/v1/groups") for n in range(3)]
        assert listed[0] == listed[1] == listed[2]
        rows = {g["group"]: g for g in listed[0]}
        assert (rows[running]["state"], rows[running]["members"], rows[running]["coordinator"]) == ("Stable", 1, 2)
        assert (rows[stopped]["state"], rows[stopped]["members"], rows[stopped]["coordinator"]) == ("Empty", 0, 1)

        for group, committed in ((running, 2), (stopped, 4)):
            described = [get(c, n, f"/v1/groups/{group}") for n in range(3)]
            for d in described:  # lag_ms is the age at the moment each node answered
                for r in d["offsets"]:
                    r.pop("lag_ms")
                d.pop("lag_ms")
            assert described[0] == described[1] == described[2], f"{group}: the nodes disagree"
            d = described[0]
            assert [(r["partition"], r["committed_offset"], r["end_offset"], r["lag"]) for r in d["offsets"]] == [
                (p, committed, PER_PARTITION, PER_PARTITION - committed) for p in range(PARTITIONS)]
            assert d["lag"] == PARTITIONS * (PER_PARTITION - committed)
        [member] = get(c, 1, f"/v1/groups/{running}")["member_details"]
        assert member["client_id"] == "reader"
        assert sorted((a["topic"], a["partition"]) for a in member["assignment"]) == [
            (TOPIC, p) for p in range(PARTITIONS)]
        # refused at the coordinator while the group runs, whichever node is asked
        r = httpx.delete(f"{c.url(0)}/v1/groups/{running}", timeout=30)
        assert r.status_code == 409 and "active member" in r.json()["error"], r.text
    finally:
        consumer.close()

    # the throughput history: every node's own, the topic's summed over the nodes that lead its partitions
    for n in range(3):
        t = get(c, n, "/v1/console/throughput")
        assert [x["node_id"] for x in t["nodes"]] == [0, 1, 2]
        assert t["topics"][TOPIC]["messages"] == PARTITIONS * PER_PARTITION
        per_node = {x["node_id"]: x["messages"] for x in t["nodes"]}
        assert per_node == {n: PER_PARTITION * sum(1 for v in leaders.values() if v == n) for n in range(3)}


def test_a_client_makes_a_topic_through_any_node(cluster: Cluster) -> None:
    """A producer that knows one node only writes to a topic nobody created: that node creates it (auto_create_topics,
    docs/KAFKA.md), the cluster places its partition, the producer is sent to its leader, and every node lists the
    topic and finds its records by key."""
    c, topic = cluster, "made-by-a-client"
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{c.nodes[1].kafka_port}", "acks": "all",  # type: ignore[attr-defined]
                         "message.timeout.ms": 30_000})
    delivered: list[Any] = []
    for i in range(10):
        producer.produce(topic, key=f"client-{i}".encode(), value=f"made {i}".encode(),
                         on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(60) == 0 and delivered == [None] * 10, delivered
    for n in range(3):
        wait_until(lambda n=n: [t["partitions"] for t in get(c, n, "/v1/topics") if t["name"] == topic] == [1], 30,
                   f"node {n} to list {topic}")

    def found() -> list[str]:
        r = httpx.get(f"{c.url(2)}/v1/messages", params={"topic": topic, "key": "client-7"}, timeout=30)
        return [m["value"] for m in r.json().get("messages", [])] if r.status_code == 200 else []

    wait_until(lambda: found() == ["made 7"], 30, "node 2 to find client-7")
