"""Kafka transactions on a three-node cluster (one PostgreSQL metadata database, one SeaweedFS bucket):
confluent-kafka's transactional producer writes to three partitions each led by a different
node and commits its consumer offsets, the coordinator writes the commit and abort markers on the other nodes
through their internal route, and a read_committed consumer reads exactly the committed records. With a
partition's leader killed (kill -9) in the middle of the commit, and then the coordinator killed too, the
transaction is completed once they are back, from the state in the metadata: every partition gets its marker.
The internal marker route refuses any token but the cluster's (a node with HTTP tokens)."""

from __future__ import annotations

import signal
import threading
import uuid
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from api.kafka import errors
from storage_tier.seaweedfs_server import SeaweedFS
from tests.api.server import ServerProcess, wait_for
from tests.kafka.conftest import KafkaServerProcess, kafka_nodes, read_until_quiet
from tests.kafka.wire import Wire

TOPIC, INPUT, PARTS = "txc", "txc-in", 3
ADMIN, READER, CLUSTER = "adminTOKENtxnTest0001", "readTOKENtxnTest00002", "clusterTOKENtxnTest03"
#: long enough that a killed node is restarted before its lease ends: no other node fails its partitions over
#: (with local WALs a failover loses what the dead node had not uploaded)
LEASE_MS = 60_000
ENV = {"MQINDEX_TOKENS": f"{ADMIN}=admin;{READER}=read;{CLUSTER}=read", "MQINDEX_CLUSTER_TOKEN": CLUSTER}


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory, seaweedfs: SeaweedFS, pg_url: Callable[[], str]
          ) -> Iterator[list[KafkaServerProcess]]:
    """Three nodes for the module's tests (the one that kills nodes runs last and restarts them)."""
    tmp_path = tmp_path_factory.mktemp("txc")
    store, meta = seaweedfs.store_url("mqindex", f"txc-{uuid.uuid4().hex[:8]}"), pg_url()
    with kafka_nodes(tmp_path, PARTS, {TOPIC: PARTS, INPUT: 1}, "--store", store, "--metadata", meta,
                     "--lease-ms", str(LEASE_MS)) as made:
        yield made


def bootstrap(nodes: list[KafkaServerProcess]) -> str:
    return ",".join(s.bootstrap for s in nodes)


def leaders(nodes: list[KafkaServerProcess]) -> dict[int, int]:
    """Partition -> the node id leading it, asked of a running node."""
    s = next(n for n in nodes if n.proc is not None and n.proc.poll() is None)
    with Wire(s.kafka_port) as w:
        meta = w.call((3, 1), topics=[dict(name=TOPIC)])
    return {p.partition_index: p.leader_id for t in meta.topics for p in t.partitions}


def list_latest(nodes: list[KafkaServerProcess], partition: int, isolation: int) -> Any:
    """ListOffsets' answer for the partition's end (isolation 0) or last stable offset (1), asked of its leader."""
    with Wire(nodes[leaders(nodes)[partition]].kafka_port) as w:
        resp = w.call((2, 7), replica_id=-1, isolation_level=isolation, topics=[
            dict(name=TOPIC, partitions=[dict(partition_index=partition, current_leader_epoch=-1, timestamp=-1)])])
        return resp.topics[0].partitions[0]


def latest(nodes: list[KafkaServerProcess], partition: int, isolation: int) -> int:
    """The partition's end (isolation 0) or last stable offset (1), asked of its leader."""
    p = list_latest(nodes, partition, isolation)
    assert p.error_code == errors.NONE, p
    return int(p.offset)


def read_all(nodes: list[KafkaServerProcess], isolation: str, expect: int, timeout: float = 60) -> list[bytes]:
    """Every key of TOPIC from the start, read until `expect` are in and one more second passes quiet."""
    return [m.key() for m in read_until_quiet(bootstrap(nodes), [(TOPIC, i) for i in range(PARTS)], expect,
                                              timeout, isolation)]


def stable(nodes: list[KafkaServerProcess], ends: dict[int, int]) -> bool:
    """Whether each partition ends where given and is stable up to it (False while its leader cannot answer)."""
    try:
        return all(latest(nodes, q, 1) == latest(nodes, q, 0) == end for q, end in ends.items())
    except (AssertionError, OSError):
        return False


def coordinated_by(node: int, prefix: str) -> str:
    """A transactional id the given node coordinates (crc32 of the id over the sorted live node ids)."""
    return next(t for t in (f"{prefix}-{i}" for i in range(1000)) if zlib.crc32(t.encode()) % PARTS == node)


def lookup(s: KafkaServerProcess, key: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{s.url}/v1/messages", params={"topic": TOPIC, "key": key}, timeout=60)
    assert r.status_code == 200, r.text
    return list(r.json()["messages"])


def test_markers_reach_partitions_led_by_other_nodes(nodes: list[KafkaServerProcess]) -> None:
    assert sorted(leaders(nodes).values()) == [0, 1, 2]  # one partition led by each node
    tid = coordinated_by(0, "txc-cross")
    p = Producer({"bootstrap.servers": bootstrap(nodes), "transactional.id": tid})
    p.init_transactions(30)
    # read_committed: its OffsetFetch asks require_stable, so it gets the offsets once the commit has moved them
    # (EndTxn is answered when the decision is stored; the markers and the offsets follow)
    group = Consumer({"bootstrap.servers": bootstrap(nodes), "group.id": "txc-group",
                      "isolation.level": "read_committed"})
    try:
        p.begin_transaction()
        for part in range(PARTS):
            for i in range(3):
                p.produce(TOPIC, key=f"commit-{part}-{i}".encode(), value=b"c", partition=part)
        p.send_offsets_to_transaction([TopicPartition(INPUT, 0, 7)], group.consumer_group_metadata(), 30)
        p.commit_transaction(60)
        assert group.committed([TopicPartition(INPUT, 0)], 30)[0].offset == 7

        p.begin_transaction()
        for part in range(PARTS):
            for i in range(2):
                p.produce(TOPIC, key=f"abort-{part}-{i}".encode(), value=b"a", partition=part)
        p.send_offsets_to_transaction([TopicPartition(INPUT, 0, 9)], group.consumer_group_metadata(), 30)
        assert p.flush(30) == 0
        p.abort_transaction(60)
        assert group.committed([TopicPartition(INPUT, 0)], 30)[0].offset == 7
    finally:
        group.close()
    # every partition, on every node, gets both markers (written after EndTxn is answered): stable up to its end
    wait_for("both markers on every partition", lambda: stable(nodes, {q: 3 + 1 + 2 + 1 for q in range(PARTS)}),
             timeout=30)
    got = read_all(nodes, "read_committed", 9)
    assert sorted(got) == sorted(f"commit-{q}-{i}".encode() for q in range(PARTS) for i in range(3))
    assert len(read_all(nodes, "read_uncommitted", 15)) == 15
    for s in nodes:  # key lookups from any node: the committed record, never the aborted one
        assert [m["key"] for m in lookup(s, "commit-2-1")] == ["commit-2-1"]
        assert lookup(s, "abort-1-0") == []


def test_the_marker_route_takes_only_the_cluster_token(tmp_path: Path) -> None:
    s = ServerProcess(tmp_path / "node", env=ENV).start()
    try:
        created = httpx.post(f"{s.url}/v1/topics", json={"name": TOPIC, "partitions": 2},
                             headers={"authorization": f"Bearer {ADMIN}"}, timeout=30)
        assert created.status_code in (200, 201), created.text
        body = {"producer_id": 1, "epoch": 0, "commit": False, "partitions": [[TOPIC, 0], [TOPIC, 5]]}
        url = f"{s.url}/v1/internal/txn/markers"
        assert httpx.post(url, json=body, timeout=30).status_code == 401
        for token in (ADMIN, READER):  # a user's token, whatever its scopes, cannot end a transaction
            r = httpx.post(url, json=body, headers={"authorization": f"Bearer {token}"}, timeout=30)
            assert r.status_code == 403, r.text
        r = httpx.post(url, json=body, headers={"authorization": f"Bearer {CLUSTER}"}, timeout=30)
        assert r.status_code == 200, r.text
        assert [(f["topic"], f["partition"]) for f in r.json()["failed"]] == [(TOPIC, 5)]  # no such partition
        fetched = httpx.get(f"{s.url}/v1/topics/{TOPIC}/partitions/0/messages", params={"offset": 0},
                            headers={"authorization": f"Bearer {READER}"}, timeout=30)
        assert fetched.status_code == 200 and fetched.json()["messages"] == []  # a marker is no message
    finally:
        s.stop()


def test_a_partition_moved_in_the_middle_of_a_transaction_keeps_it_open_and_gets_its_marker(
        nodes: list[KafkaServerProcess]) -> None:
    tid = coordinated_by(0, "txc-move")
    lead = leaders(nodes)
    moved = next(q for q, n in lead.items() if n != 0)
    target = next(n for n in range(PARTS) if n not in (lead[moved],))
    starts = {q: latest(nodes, q, 0) for q in range(PARTS)}
    p = Producer({"bootstrap.servers": bootstrap(nodes), "transactional.id": tid})
    p.init_transactions(30)
    p.begin_transaction()
    for part in range(PARTS):
        p.produce(TOPIC, key=f"move-{part}-0".encode(), value=b"m", partition=part)
    assert p.flush(30) == 0
    r = httpx.post(f"{nodes[0].url}/v1/admin/reassignments", json={"topic": TOPIC, "partition": moved, "to": target},
                   timeout=60)
    assert r.status_code == 200, r.text
    assert leaders(nodes)[moved] == target
    # the new leader rebuilt the partition's open transaction: stable only up to its first record
    assert latest(nodes, moved, 0) == starts[moved] + 1 and latest(nodes, moved, 1) == starts[moved]
    for part in range(PARTS):  # the same transaction goes on, to the new leader
        p.produce(TOPIC, key=f"move-{part}-1".encode(), value=b"m", partition=part)
    p.commit_transaction(60)
    # two records and the marker each (the markers are written after EndTxn is answered)
    wait_for("the commit markers", lambda: stable(nodes, {q: starts[q] + 3 for q in range(PARTS)}), timeout=30)
    got = [k for k in read_all(nodes, "read_committed", 6) if k.startswith(b"move-")]
    assert sorted(got) == sorted(f"move-{q}-{i}".encode() for q in range(PARTS) for i in range(2))


def test_a_commit_interrupted_by_kills_is_completed_on_every_partition(nodes: list[KafkaServerProcess]) -> None:
    tid = coordinated_by(0, "txc-kill")
    lead = leaders(nodes)
    victim_part = next(q for q, n in lead.items() if n != 0)
    victim = nodes[lead[victim_part]]
    ends = {q: latest(nodes, q, 0) + 3 + 1 for q in range(PARTS)}  # three records and the commit marker each
    p = Producer({"bootstrap.servers": bootstrap(nodes), "transactional.id": tid})
    p.init_transactions(30)
    p.begin_transaction()
    for part in range(PARTS):
        for i in range(3):
            p.produce(TOPIC, key=f"kill-{part}-{i}".encode(), value=b"k", partition=part)
    assert p.flush(30) == 0
    others = [q for q in range(PARTS) if q != victim_part]

    victim.stop(signal.SIGKILL)  # the leader of one partition is gone before the commit
    outcome: list[BaseException | None] = []

    def commit() -> None:
        try:
            p.commit_transaction(120)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            outcome.append(exc)

    committer = threading.Thread(target=commit, daemon=True)
    committer.start()
    # the coordinator writes the markers it can: the partitions on the live nodes become stable
    wait_for("the markers on the partitions of the live nodes",
             lambda: stable(nodes, {q: ends[q] for q in others}), timeout=60)
    nodes[0].stop(signal.SIGKILL)  # and then the coordinator, with the commit prepared and one marker missing
    victim.start()  # one after the other: both within the lease, and no start competes with another
    nodes[0].start()
    wait_for("the last marker, written after the restarts",
             lambda: stable(nodes, ends), timeout=90, interval=0.5)
    committer.join(120)
    assert outcome == [None], outcome
    got = [k for k in read_all(nodes, "read_committed", 9) if k.startswith(b"kill-")]
    assert sorted(got) == sorted(f"kill-{q}-{i}".encode() for q in range(PARTS) for i in range(3))
    assert [m["key"] for m in lookup(nodes[1], f"kill-{victim_part}-2")] == [f"kill-{victim_part}-2"]
