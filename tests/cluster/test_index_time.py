"""A begin/end lookup over the append time answers the same messages in the same pages before and after the
leader of their partition is killed with kill -9 and a survivor takes it over from the shared WAL (its
re-dispatch and the rescue of the dead node's index entries index them at the append time stored with each
record, not at the producer's timestamp, here an hour behind), and a window straddling the kill finds the
messages acknowledged on either side of it."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from kafka import KafkaProducer

from storage_tier.seaweedfs_server import SeaweedFS
from tests.api.server import ServerProcess, free_port
from tests.cluster.harness import TOPIC, Cluster, key_pages, wait_until

HOUR_MS = 3_600_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
def two_nodes(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> Iterator[Cluster]:
    prefix = f"index-time-{uuid.uuid4().hex[:8]}"
    c = Cluster(tmp_path, seaweedfs.store_url("mqindex", prefix), pg_url(),
                "--wal", seaweedfs.store_url("mqindex", prefix + "-wal"))
    try:
        for n in (0, 1):  # as Cluster.start, each with a Kafka listener of its own
            port = free_port()
            c.nodes[n] = ServerProcess(c.tmp / f"node{n}", "--store", c.store, "--metadata", c.meta, "--node-id",
                                       str(n), "--lease-ms", "3000", "--kafka-listener", f"127.0.0.1:{port}",
                                       *c.extra).start()
            c.nodes[n].kafka_port = port  # type: ignore[attr-defined]
        yield c
    finally:
        c.stop_all()


def pages(base: str, key: str, begin: int, end: int, size: int) -> list[list[tuple[int, int, int]]]:
    return key_pages(base, key, begin, end, size, all_readable=True)


def produce(c: Cluster, node: int, p: int, first: int, n: int, timestamp: int) -> list[tuple[int, int]]:
    """A Kafka client's records `first`.. with CreateTime `timestamp` + their number, in batches of up to 4:
    (offset, timestamp) of each as acknowledged."""
    producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{c.nodes[node].kafka_port}",  # type: ignore[attr-defined]
                             acks="all", linger_ms=50, batch_size=4 * 40)
    try:
        futures = [producer.send(TOPIC, key=b"w", value=f"m{j}".encode(), partition=p, timestamp_ms=timestamp + j,
                                 headers=[("KEYS", f"w{j % 2}".encode())]) for j in range(first, first + n)]
        producer.flush(60)
        return [(md.offset, md.timestamp) for md in (f.get(timeout=60) for f in futures)]
    finally:
        producer.close()


def test_a_window_answers_the_same_pages_across_a_kill_and_a_failover(two_nodes: Cluster) -> None:
    c = two_nodes
    assert httpx.post(f"{c.url(0)}/v1/topics", json={"name": TOPIC, "partitions": 2}, timeout=60).status_code == 201
    led = c.leaders()
    p1 = int(led[1][0].rsplit("-", 1)[1])
    skew = now_ms() - HOUR_MS  # the producer's clock is an hour behind

    begin = now_ms()
    before_kill = produce(c, 1, p1, 0, 21, skew)
    end = now_ms()
    assert before_kill == [(j, skew + j) for j in range(21)]
    window = {k: pages(c.url(0), k, begin, end, 4) for k in ("w", "w0", "w1")}
    assert sorted(o for _, o, _ in sum(window["w"], [])) == list(range(21)) and len(window["w"]) == 6
    assert pages(c.url(0), "w", skew - 1000, skew + 1000, 4) == [[]]  # indexed by append time, not the producer's

    # kill -9 of the partition's leader: node 0 takes it over, replays node 1's acknowledged records from the
    # shared WAL and re-dispatches them to its index
    assert c.nodes[1].stop(signal.SIGKILL) == -signal.SIGKILL
    wait_until(lambda: f"{TOPIC}-{p1}" in c.leaders().get(0, []), 60, "node 1's partition taken over")
    wait_until(lambda: "entries" in c.index_rescue(1), 60, "the failover done")
    assert {k: pages(c.url(0), k, begin, end, 4) for k in window} == window

    # a window straddling the kill: the messages acknowledged on both sides, the newest first
    after_kill = produce(c, 0, p1, 21, 9, skew)
    straddle_end = now_ms()
    assert after_kill == [(j, skew + j) for j in range(21, 30)]
    both = pages(c.url(0), "w", begin, straddle_end, 4)
    assert [o for _, o, _ in sum(both, [])] == list(range(29, -1, -1))
    assert sum(both, [])[9:] == sum(window["w"], [])  # the messages before the kill, in the same order
    assert pages(c.url(0), "w", end + 1, straddle_end, 50) == [[(p1, o, skew + o) for o in range(29, 20, -1)]]


def test_rescued_entries_keep_the_append_time(two_nodes: Cluster) -> None:
    """The partition handed to node 0 before node 1 dies: node 1's entries were only in its local index, and the
    failover's rescue rebuilds them from the stream at the stored append time."""
    c = two_nodes
    assert httpx.post(f"{c.url(0)}/v1/topics", json={"name": TOPIC, "partitions": 2}, timeout=60).status_code == 201
    p1 = int(c.leaders()[1][0].rsplit("-", 1)[1])
    skew = now_ms() - HOUR_MS
    begin = now_ms()
    assert produce(c, 1, p1, 0, 13, skew) == [(j, skew + j) for j in range(13)]
    end = now_ms()
    window = {k: pages(c.url(0), k, begin, end, 3) for k in ("w", "w0", "w1")}
    assert sorted(o for _, o, _ in sum(window["w"], [])) == list(range(13))
    r = httpx.post(f"{c.url(1)}/v1/admin/reassignments", json={"topic": TOPIC, "partition": p1, "to": 0},
                   timeout=120)
    assert r.status_code == 200, r.text
    assert c.nodes[1].stop(signal.SIGKILL) == -signal.SIGKILL
    wait_until(lambda: "entries" in c.index_rescue(1), 60, "node 1's index entries rebuilt")
    assert c.index_rescue(1)["entries"] == 13
    assert {k: pages(c.url(0), k, begin, end, 3) for k in window} == window
    assert pages(c.url(0), "w", skew - 1000, skew + 1000, 3) == [[]]
