"""Three `mqindex serve` processes on one PostgreSQL metadata database and one SeaweedFS bucket:
partitions spread over the nodes, move between them under a producer, and every acknowledged message is
found by key and by id from every node; a stale source is fenced; a node that stops hands its partitions
over; `rebalance` evens them out after a node joins."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from broker.errors import Fenced
from broker.metadata import MetadataClient
from broker.partitions.object_listing import open_topic
from storage_tier.seaweedfs_server import SeaweedFS
from tests.api.server import ServerProcess

TOPIC = "orders"
KEYS = 40


class Cluster:
    def __init__(self, tmp: Path, store: str, meta: str) -> None:
        self.tmp, self.store, self.meta = tmp, store, meta
        self.nodes: dict[int, ServerProcess] = {}

    def start(self, node_id: int) -> ServerProcess:
        s = ServerProcess(self.tmp / f"node{node_id}", "--store", self.store, "--metadata", self.meta,
                          "--node-id", str(node_id), "--lease-ms", "3000")
        self.nodes[node_id] = s.start()
        return s

    def url(self, node_id: int) -> str:
        return self.nodes[node_id].url

    def leaders(self, via: int = 0) -> dict[int, list[str]]:
        body = httpx.get(f"{self.url(via)}/v1/cluster/nodes", timeout=10).json()
        return {n["node_id"]: n["partitions"] for n in body["nodes"] if n["state"] == "alive"}

    def stop_all(self) -> None:
        for s in self.nodes.values():
            if s.proc is not None and s.proc.poll() is None:
                s.stop(signal.SIGKILL)


@pytest.fixture
def cluster(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> Iterator[Cluster]:
    c = Cluster(tmp_path, seaweedfs.store_url("mqindex", f"cluster-{uuid.uuid4().hex[:8]}"), pg_url())
    try:
        for i in range(3):
            c.start(i)
        yield c
    finally:
        c.stop_all()


class Producer(threading.Thread):
    """Produces keyed messages through node 0, following 421s to the leader; records every ack."""

    def __init__(self, c: Cluster) -> None:
        super().__init__(daemon=True)
        self.c = c
        self.acked: list[dict[str, Any]] = []
        self.statuses: dict[int, int] = {}
        self.stop_flag = threading.Event()

    def run(self) -> None:
        i = 0
        with httpx.Client(timeout=30) as http:
            while not self.stop_flag.is_set():
                msg = {"key": f"k{i % KEYS}", "value": f"v{i}"}
                base = self.c.url(0)
                for _ in range(200):
                    try:
                        r = http.post(f"{base}/v1/topics/{TOPIC}/messages", json={"messages": [msg]})
                    except httpx.ConnectError:  # the leader it was sent to stopped: start over at node 0
                        self.statuses[0] = self.statuses.get(0, 0) + 1
                        base = self.c.url(0)
                        continue
                    self.statuses[r.status_code] = self.statuses.get(r.status_code, 0) + 1
                    if r.status_code == 200:
                        self.acked.append({**msg, **r.json()["results"][0]})
                        break
                    if r.status_code == 421:
                        base = r.json()["leader_url"]
                        continue
                    if r.status_code == 503:
                        time.sleep(0.02)
                        continue
                    return  # anything else is a failure the test reports
                i += 1


def _all_by_key(base: str, key: str) -> list[dict[str, Any]]:
    out, cursor = [], None
    while True:
        params: dict[str, Any] = {"topic": TOPIC, "key": key, "max": 500}
        if cursor:
            params["cursor"] = cursor
        body = httpx.get(f"{base}/v1/messages", params=params, timeout=60).json()
        out += body["messages"]
        cursor = body["next_cursor"]
        if not cursor:
            return out


def _check_everything_found(c: Cluster, acked: list[dict[str, Any]], via: list[int]) -> None:
    by_key: dict[str, set[tuple[int, int, str]]] = {}
    for a in acked:
        by_key.setdefault(a["key"], set()).add((a["partition"], a["offset"], a["value"]))
    for node in via:
        base = c.url(node)
        for key, want in by_key.items():
            got = _all_by_key(base, key)
            seen = [(m["partition"], m["offset"], m["value"]) for m in got]
            assert len(seen) == len(set(seen)), f"duplicates for {key} from node {node}"
            assert set(seen) == want, f"node {node}, key {key}: missing {sorted(want - set(seen))[:5]}"
            times = [(m["timestamp"], m["offset"]) for m in got]
            assert [t for t, _ in times] == sorted((t for t, _ in times), reverse=True)
        for a in acked[:: max(1, len(acked) // 40)]:
            r = httpx.get(f"{base}/v1/messages/{a['msg_id']}", timeout=30)
            assert r.status_code == 200 and r.json()["value"] == a["value"], (node, a, r.text)


def _check_offsets(acked: list[dict[str, Any]]) -> None:
    per: dict[int, list[int]] = {}
    for a in acked:
        per.setdefault(a["partition"], []).append(a["offset"])
    for p, offsets in per.items():
        assert sorted(offsets) == list(range(len(offsets))), f"partition {p}: offsets not contiguous"


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
            while len(producer.acked) < 10 * (move + 1) and producer.is_alive():
                time.sleep(0.01)
            part = move % 6
            current = {p: n for n, ps in c.leaders().items() for p in ps}[f"{TOPIC}-{part}"]
            target = (current + 1) % 3
            r = httpx.post(f"{c.url(move % 3)}/v1/admin/reassignments",
                           json={"topic": TOPIC, "partition": part, "to": target}, timeout=60)
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["from"] == current and body["to"] == target
            seconds.append(body["seconds"])
    finally:
        producer.stop_flag.set()
        producer.join(60)
    assert not producer.is_alive()
    assert set(producer.statuses) <= {200, 421, 503}, producer.statuses
    assert len(producer.acked) >= 200
    _check_offsets(producer.acked)
    _check_everything_found(c, producer.acked, via=[0, 1, 2])

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
    while len(producer.acked) < 150 and producer.is_alive():
        time.sleep(0.01)
    assert c.nodes[2].stop(signal.SIGTERM) == 0  # graceful: its partitions move to nodes 0 and 1
    while len(producer.acked) < 250 and producer.is_alive():
        time.sleep(0.01)
    producer.stop_flag.set()
    producer.join(60)
    assert set(producer.statuses) <= {0, 200, 421, 503}, producer.statuses
    leaders = c.leaders()
    assert sorted(leaders) == [0, 1] and sorted(len(v) for v in leaders.values()) == [3, 3]
    _check_offsets(producer.acked)
    _check_everything_found(c, producer.acked, via=[0, 1])  # node 2's index files are read from the store

    c.start(3)
    cli = [str(Path(sys.executable).parent / "mqindex"), "rebalance", "--url", c.url(0)]
    plan = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert plan.returncode == 0 and "plan: 2 move(s)" in plan.stderr, plan.stderr
    assert sorted(len(v) for v in c.leaders().values()) == [0, 3, 3]  # a plan only: node 3 leads nothing yet
    done = subprocess.run([*cli, "--execute"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert sorted(len(v) for v in c.leaders().values()) == [2, 2, 2] and 3 in c.leaders()
    _check_everything_found(c, producer.acked, via=[3])
