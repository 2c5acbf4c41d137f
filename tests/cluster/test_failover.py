"""Failover: a node killed for good (kill -9, never restarted) loses no acknowledged message when its WAL
is on shared storage; with a local WAL the loss is reported, not hidden."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from storage_tier.seaweedfs_server import SeaweedFS
from tests.cluster.harness import (
    TOPIC,
    Cluster,
    Producer,
    all_by_key,
    check_everything_found,
    check_offsets,
    wait_until,
)


def _leaders(c: Cluster) -> dict[str, int]:
    via = c.url(c.running()[0])
    body = httpx.get(f"{via}/v1/cluster/nodes", timeout=10).json()
    return {p: n["node_id"] for n in body["nodes"] if n["state"] == "alive" for p in n["partitions"]}


@pytest.mark.slow(seconds=60)
def test_ten_nodes_killed_for_good_lose_nothing_with_the_shared_wal(tmp_path: Path, seaweedfs: SeaweedFS,
                                                                    pg_url: Callable[[], str]) -> None:
    prefix = f"failover-{uuid.uuid4().hex[:8]}"
    c = Cluster(tmp_path, seaweedfs.store_url("mqindex", prefix), pg_url(),
                "--wal", seaweedfs.store_url("mqindex", prefix + "-wal"), "--upload-interval-s", "30")
    producer = None
    try:
        for i in range(3):
            c.start(i)
        assert httpx.post(f"{c.url(0)}/v1/topics", json={"name": TOPIC, "partitions": 6}, timeout=60).status_code == 201
        producer = Producer(c)
        producer.start()
        next_id = 3
        for _ in range(10):
            before = len(producer.acked)
            wait_until(lambda b=before: len(producer.acked) >= b + 20, 60, "the producer goes on")
            led = _leaders(c)
            victim = max(c.running(), key=lambda n: (sum(1 for v in led.values() if v == n), -n))  # leads most
            assert c.nodes[victim].stop(signal.SIGKILL) == -signal.SIGKILL
            c.start(next_id)
            next_id += 1
            # every partition led by a running node again, and acknowledged writes flowing
            wait_until(lambda: len(_leaders(c)) == 6 and set(_leaders(c).values()) <= set(c.running()), 60,
                  f"partitions of node {victim} taken over")
            after = len(producer.acked)
            wait_until(lambda a=after: len(producer.acked) >= a + 10, 60, "acknowledged produce after the failover")
        producer.stop_flag.set()
        producer.join(60)
        assert not producer.is_alive()
        assert set(producer.statuses) <= {0, 200, 421, 503}, producer.statuses
        def reports() -> list[dict[str, Any]]:
            return httpx.get(f"{c.url(c.running()[0])}/v1/cluster/failovers", timeout=10).json()["failovers"]

        wait_until(lambda: len(reports()) >= 10, 30, "ten failover reports")
        failovers = reports()
        assert len(failovers) == 10 and all(f["wal"] == "shared" for f in failovers)
        assert sum(f["replayed_records"] for f in failovers) > 0  # records only the dead nodes' WALs held
        check_offsets(c, producer.acked)
        # every acknowledged record by id from a live node (by offset: check_offsets above)
        base = c.url(c.running()[0])
        with httpx.Client(timeout=30) as http:
            for a in producer.acked:
                r = http.get(f"{base}/v1/messages/{a['msg_id']}")
                assert r.status_code == 200 and r.json()["value"] == a["value"], (a, r.text)
        # and by key (all pages) from a live node, nothing twice: the records the killed nodes had indexed
        # but not uploaded (including for partitions they had handed over) were indexed again, once the
        # failovers' index rescues (after the partitions serve again) are done
        wait_until(lambda: all("entries" in f.get("index_rescue", {}) for f in reports()), 60, "index rescues done")
        check_everything_found(c, producer.acked, [c.running()[0]], producer.in_doubt)
    finally:
        if producer is not None:
            producer.stop_flag.set()
        c.stop_all()


def test_keys_a_killed_node_indexed_for_a_partition_it_handed_over_are_found(
        tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> None:
    prefix = f"handed-{uuid.uuid4().hex[:8]}"
    c = Cluster(tmp_path, seaweedfs.store_url("mqindex", prefix), pg_url(),
                "--wal", seaweedfs.store_url("mqindex", prefix + "-wal"))
    try:
        c.start(0)
        c.start(1)
        assert httpx.post(f"{c.url(0)}/v1/topics", json={"name": TOPIC, "partitions": 2}, timeout=60).status_code == 201
        p1 = int(next(p for p, n in _leaders(c).items() if n == 1).rsplit("-", 1)[1])
        acked = []
        for i in range(30):
            r = httpx.post(f"{c.url(1)}/v1/topics/{TOPIC}/messages",
                           json={"messages": [{"key": "moved", "value": f"m{i}", "partition": p1}]}, timeout=30)
            assert r.status_code == 200
            acked.append(r.json()["results"][0]["offset"])
        # node 1 hands the partition to node 0; its index entries for it are only in node 1's local files
        r = httpx.post(f"{c.url(1)}/v1/admin/reassignments", json={"topic": TOPIC, "partition": p1, "to": 0},
                       timeout=120)
        assert r.status_code == 200, r.text
        assert c.nodes[1].stop(signal.SIGKILL) == -signal.SIGKILL  # leads nothing now, never comes back


        wait_until(lambda: "entries" in c.index_rescue(1), 60, "node 1's index entries rebuilt")
        assert c.index_rescue(1)["entries"] == 30 and c.index_rescue(1)["ranges"] == [[TOPIC, p1, 0, 30]]
        found = [(m["partition"], m["offset"]) for m in all_by_key(c.url(0), "moved")]
        assert sorted(found) == sorted((p1, o) for o in acked)  # every one, once
    finally:
        c.stop_all()


def test_a_local_wal_reports_what_a_dead_node_took_with_it(tmp_path: Path, seaweedfs: SeaweedFS,
                                                           pg_url: Callable[[], str]) -> None:
    c = Cluster(tmp_path, seaweedfs.store_url("mqindex", f"lost-{uuid.uuid4().hex[:8]}"), pg_url(),
                "--upload-interval-s", "600")
    try:
        c.start(0)
        c.start(1)
        assert httpx.post(f"{c.url(0)}/v1/topics", json={"name": TOPIC, "partitions": 2}, timeout=60).status_code == 201
        led = _leaders(c)
        p1 = int(next(p for p, n in led.items() if n == 1).rsplit("-", 1)[1])
        acked = []
        for i in range(30):
            r = httpx.post(f"{c.url(1)}/v1/topics/{TOPIC}/messages",
                           json={"messages": [{"key": "lost", "value": f"w{i}", "partition": p1}]}, timeout=30)
            assert r.status_code == 200
            acked.append(r.json()["results"][0])
        assert c.nodes[1].stop(signal.SIGKILL) == -signal.SIGKILL  # its WAL (local) held all 30, none uploaded
        wait_until(lambda: len(_leaders(c)) == 2 and set(_leaders(c).values()) == {0}, 60,
                   "node 1's partition taken over")

        def reports() -> list[dict[str, Any]]:
            return httpx.get(f"{c.url(0)}/v1/cluster/failovers", timeout=10).json()["failovers"]

        wait_until(lambda: bool(reports()), 30, "the failover's report")
        failovers = reports()
        assert len(failovers) == 1
        f = failovers[0]
        assert f["node"] == 1 and f["wal"] == "local" and f["replayed_records"] == 0
        end = f["committed_ends"][f"{TOPIC}-{p1}"]
        found = {m["offset"] for m in all_by_key(c.url(0), "lost")}
        lost = [a["offset"] for a in acked if a["offset"] not in found]
        # the loss is real and exactly what the report says: every acknowledged offset at or past the
        # committed end it names is gone, nothing before it
        assert lost and all(o >= end for o in lost) and all(a["offset"] in found for a in acked if a["offset"] < end)
        log = (tmp_path / "node0-server.log").read_text()
        assert "its WAL was local" in log
    finally:
        c.stop_all()


@pytest.mark.slow(seconds=25)
def test_a_survivor_killed_during_its_index_rescue_leaves_it_to_the_next_without_a_second_failover(
        tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> None:
    """Node 2 indexes 20,000 records and hands both partitions over; killed, it is failed over by node 0 (the
    failover leader) for its index claims alone. Node 0 is killed while it rebuilds those entries: node 1 resumes
    the rescue under node 2's one report, without fencing node 2 again, and every record is found by key once."""
    prefix = f"resumed-{uuid.uuid4().hex[:8]}"
    c = Cluster(tmp_path, seaweedfs.store_url("mqindex", prefix), pg_url(),
                "--wal", seaweedfs.store_url("mqindex", prefix + "-wal"), "--upload-interval-s", "600")
    try:
        for n in range(3):
            c.start(n)
        assert httpx.post(f"{c.url(0)}/v1/topics", json={"name": TOPIC, "partitions": 2}, timeout=60).status_code == 201

        def move(partition: int, to: int) -> None:
            r = httpx.post(f"{c.url(0)}/v1/admin/reassignments", json={"topic": TOPIC, "partition": partition,
                                                                       "to": to}, timeout=120)
            assert r.status_code == 200, r.text

        for p in (0, 1):
            if _leaders(c)[f"{TOPIC}-{p}"] != 2:
                move(p, 2)
        acked: list[tuple[int, int]] = []
        with httpx.Client(timeout=60) as http:
            for i in range(20):
                msgs = [{"key": "rescued", "value": f"r{i}-{j}", "partition": i % 2} for j in range(1000)]
                r = http.post(f"{c.url(2)}/v1/topics/{TOPIC}/messages", json={"messages": msgs})
                assert r.status_code == 200, r.text[:300]
                acked += [(m["partition"], m["offset"]) for m in r.json()["results"]]
        for p in (0, 1):  # node 2's entries for them are now only in its local index files (claims)
            move(p, 1)
        assert c.nodes[2].stop(signal.SIGKILL) == -signal.SIGKILL

        def reports_of(node: int) -> list[dict[str, Any]]:
            got = httpx.get(f"{c.url(1)}/v1/cluster/failovers", timeout=10).json()["failovers"]
            return [f for f in got if f["node"] == node]

        deadline = time.monotonic() + 60
        while not reports_of(2):
            assert time.monotonic() < deadline, "node 2 not failed over within 60 s"
            time.sleep(0.02)
        first = reports_of(2)
        assert c.nodes[0].stop(signal.SIGKILL) == -signal.SIGKILL  # the survivor, during its rescue
        assert len(first) == 1 and first[0]["by"] == 0 and first[0]["partitions"] == []
        assert "index_rescue" not in first[0], "node 0 finished the rescue before it could be killed"

        wait_until(lambda: "entries" in c.index_rescue(2, via=1), 90, "node 2's rescue resumed by node 1")
        after = reports_of(2)
        assert len(after) == 1 and after[0]["fenced_epoch"] == first[0]["fenced_epoch"], after  # fenced once
        assert after[0]["index_rescue"]["entries"] == len(acked)
        found = [(m["partition"], m["offset"]) for m in all_by_key(c.url(1), "rescued")]
        assert sorted(found) == sorted(acked)  # every one, once
        assert "resuming the index rescue its survivor did not finish" in (tmp_path / "node1-server.log").read_text()
    finally:
        c.stop_all()
