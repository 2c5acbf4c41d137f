"""Three `mqindex serve` processes on one PostgreSQL metadata database and one SeaweedFS bucket:
partitions spread over the nodes, move between them under a producer, and every acknowledged message is
found by key and by id from every node; a stale source is fenced; a node that stops hands its partitions
over; `rebalance` evens them out after a node joins."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from broker.errors import Fenced
from broker.metadata import MetadataClient
from broker.partitions.object_listing import open_topic
from tests.cluster.harness import TOPIC, Cluster, Producer, check_everything_found, check_offsets


def test_partitions_spread_move_under_a_producer_and_every_key_is_found_from_every_node(cluster: Cluster) -> None:
    c = cluster
    r = httpx.post(f"{c.url(0)}/v1/topics", json={"name": TOPIC, "partitions": 6}, timeout=60)
    assert r.status_code == 201, r.text
    assert sorted(len(v) for v in c.leaders().values()) == [2, 2, 2]

    # a request for a partition led elsewhere names the leader (421)
    leader_of = {p: n for n, ps in c.leaders().items() for p in ps}
    other = next(n for n in range(3) if n != leader_of[f"{TOPIC}-0"])
    r = httpx.post(f"{c.url(other)}/v1/topics/{TOPIC}/messages", json={"messages": [{"value": "x", "partition": 0}]})
    assert r.status_code == 421 and r.json()["leader"] == leader_of[f"{TOPIC}-0"]
    assert r.json()["leader_url"] == c.url(leader_of[f"{TOPIC}-0"])

    producer = Producer(c)
    producer.start()
    seconds = []
    try:
        for move in range(20):
            producer.wait_acked(10 * (move + 1))
            part = move % 6
            current = {p: n for n, ps in c.leaders().items() for p in ps}[f"{TOPIC}-{part}"]
            target = (current + 1) % 3
            r = httpx.post(f"{c.url(move % 3)}/v1/admin/reassignments",
                           json={"topic": TOPIC, "partition": part, "to": target}, timeout=60)
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["from"] == current and body["to"] == target
            seconds.append(body["seconds"])
            # answered once the target serves the partition (also when another node was asked): a read there right
            # away is answered, neither 503 (still opening) nor 421
            r = httpx.get(f"{c.url(target)}/v1/topics/{TOPIC}/partitions/{part}/messages",
                          params={"offset": 0, "max": 1}, timeout=30)
            assert r.status_code == 200, (move, r.status_code, r.text)
    finally:
        producer.stop_flag.set()
        producer.join(60)
    assert not producer.is_alive()
    assert set(producer.statuses) <= {200, 421, 503}, producer.statuses
    assert len(producer.acked) >= 200
    check_offsets(c, producer.acked)
    check_everything_found(c, producer.acked, via=[0, 1, 2], in_doubt=producer.in_doubt)

    # the stale source of the last move cannot append or commit at its old epoch
    meta = MetadataClient(c.meta, 77, namespace="_kafka_mqindex")
    try:
        meta.register_node()
        sid = open_topic(meta, TOPIC).streams[5].data_stream
        s = meta.get_stream(sid)
        with pytest.raises(Fenced):
            meta.open_stream(sid, s.epoch - 1)
        with pytest.raises(Fenced):
            meta.close_stream(sid, s.epoch - 1)
        assert meta.get_stream(sid).end_offset == s.end_offset
    finally:
        meta.close()


def test_a_stopping_node_hands_its_partitions_over_and_rebalance_evens_them_out(cluster: Cluster) -> None:
    c = cluster
    assert httpx.post(f"{c.url(0)}/v1/topics", json={"name": TOPIC, "partitions": 6}, timeout=60).status_code == 201
    producer = Producer(c)
    producer.start()
    producer.wait_acked(150)
    assert c.nodes[2].stop(signal.SIGTERM) == 0  # graceful: its partitions move to nodes 0 and 1
    producer.wait_acked(250)
    producer.stop_flag.set()
    producer.join(60)
    assert set(producer.statuses) <= {0, 200, 421, 503}, producer.statuses
    leaders = c.leaders()
    assert sorted(leaders) == [0, 1] and sorted(len(v) for v in leaders.values()) == [3, 3]
    check_offsets(c, producer.acked)
    # node 2's index files are read from the store
    check_everything_found(c, producer.acked, via=[0, 1], in_doubt=producer.in_doubt)

    c.start(3)
    # by count: the producer has stopped, so the by-load default would weigh what each partition took lately
    cli = [str(Path(sys.executable).parent / "mqindex"), "rebalance", "--by", "count", "--url", c.url(0)]
    plan = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert plan.returncode == 0 and "plan: 2 move(s)" in plan.stderr, plan.stderr
    assert sorted(len(v) for v in c.leaders().values()) == [0, 3, 3]  # a plan only: node 3 leads nothing yet
    done = subprocess.run([*cli, "--execute"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert sorted(len(v) for v in c.leaders().values()) == [2, 2, 2] and 3 in c.leaders()
    check_everything_found(c, producer.acked, via=[3], in_doubt=producer.in_doubt)
