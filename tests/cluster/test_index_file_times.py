"""A dead node's index files, published (uploaded files) or rebuilt by a failover's rescue, answer for entries
older than the file itself: a key query whose range ends before the file was created still finds them.

Entries can be older than their file: a rescue indexes old records at their own timestamps in a file created
at rescue time, and records dispatched late after a roll land in the new file. The published list carries, for
each file, the oldest store time it may hold (the earlier of its creation and its oldest entry), in the same three
fields as before, so nodes of either version read each other's lists."""

from __future__ import annotations

import json
import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from broker.cluster.cluster_index import FILES_PREFIX, ClusterIndex, index_file_rows, publish_files
from broker.cluster.membership import Membership
from broker.cluster.peers import Peers
from broker.metadata import MetadataClient
from broker.metadata.leases import LeaseTable
from index_service import FileState, IndexService
from storage_tier.seaweedfs_server import SeaweedFS
from tests.cluster.harness import TOPIC, Cluster, wait_until
from tests.index_service.helpers import ManualClock

HOUR_MS = 3_600_000





def node0_lookups(tmp_path: Path, store_url: str, meta_url: str, clock: ManualClock, closing: list[Any]
                  ) -> tuple[ClusterIndex, MetadataClient]:
    """Node 0's cluster-wide key lookups (its own empty index, no lease, no peers): the files other nodes
    published are read from the store. Everything opened is closed by `closing`."""
    local = IndexService.open(tmp_path / "node0", store=store_url, remote_prefix="index-node-0/", clock=clock,
                              maintain_interval_s=0)
    closing.append(local)
    meta0 = MetadataClient(meta_url, 0)
    closing.append(meta0)
    leases = LeaseTable(meta_url)
    closing.append(leases)
    peers = Peers()
    closing.append(peers)
    index = ClusterIndex(0, local.query, Membership(leases, 0, 0, None, None), peers, meta0, local.store)
    closing.append(index)
    return index, meta0


def test_a_departed_nodes_published_file_answers_for_entries_older_than_the_file(
        tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str], closing: list[Any]) -> None:
    meta_url = pg_url()
    store_url = seaweedfs.store_url("mqindex", f"times-{uuid.uuid4().hex[:8]}")
    clock = ManualClock()
    old = clock.now - HOUR_MS  # records dispatched an hour late: older than the file they land in
    # node 7's index: one uploaded file created now, holding entries an hour old
    dead = IndexService.open(tmp_path / "node7", store=store_url, remote_prefix="index-node-7/", clock=clock,
                             maintain_interval_s=0, slots=64, max_items=1000)
    closing.append(dead)
    for i in range(10):
        dead.put(TOPIC, 0, i, 10, ["late"], old + i)
    dead.flush()
    assert dead.compact_now() is not None
    dead.maintain()
    (uploaded,) = [f for f in dead.files() if f.items]  # the roll opened an empty WRITING file too
    assert uploaded.state is FileState.UPLOADED and uploaded.begin_ms == clock.now and uploaded.min_ms == old
    meta7 = MetadataClient(meta_url, 7)
    closing.append(meta7)
    publish_files(meta7, 7, index_file_rows(dead))
    dead.close()  # node 7 is gone (it never held a lease): its published files are read from the store

    index, meta0 = node0_lookups(tmp_path, store_url, meta_url, clock, closing)

    def offsets(begin_ms: int, end_ms: int | None, max_count: int = 64) -> list[int]:
        meta0.catch_up()
        return [h.offset for h in index.query(TOPIC, "late", max_count, begin_ms, end_ms)]

    every = list(range(9, -1, -1))
    assert offsets(0, None) == every
    assert offsets(0, old + 9) == every  # a range ending before the file was created
    assert offsets(old + 3, old + 5) == [5, 4, 3]
    assert offsets(0, old - 1) == []
    assert offsets(old + 10, None) == []  # after its newest entry: not read
    # the list as it is stored: three fields, the second the oldest time the file may hold (read by either version)
    (row,) = json.loads(meta7.kv_get(f"{FILES_PREFIX}7") or "[]")
    assert row == [uploaded.location, old, uploaded.end_ms]
    assert offsets(0, None, 3) == [9, 8, 7]


@pytest.fixture
def two_nodes(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> Iterator[Cluster]:
    prefix = f"rescued-{uuid.uuid4().hex[:8]}"
    c = Cluster(tmp_path, seaweedfs.store_url("mqindex", prefix), pg_url(),
                "--wal", seaweedfs.store_url("mqindex", prefix + "-wal"))
    try:
        c.start(0)
        c.start(1)
        yield c
    finally:
        c.stop_all()


def _by_key(base: str, key: str, end: int, page: int) -> list[tuple[int, int]]:
    """Every message of `key` with a timestamp up to `end`, following the cursor `page` messages at a time."""
    out: list[tuple[int, int]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"topic": TOPIC, "key": key, "max": page, "end": end}
        if cursor:
            params["cursor"] = cursor
        r = httpx.get(f"{base}/v1/messages", params=params, timeout=60)
        assert r.status_code == 200, r.text
        body = r.json()
        out += [(m["partition"], m["offset"]) for m in body["messages"]]
        cursor = body["next_cursor"]
        if not cursor:
            return out


def test_rescued_entries_are_found_by_a_range_ending_before_the_rescue(two_nodes: Cluster) -> None:
    c = two_nodes
    assert httpx.post(f"{c.url(0)}/v1/topics", json={"name": TOPIC, "partitions": 2}, timeout=60).status_code == 201
    body = httpx.get(f"{c.url(0)}/v1/cluster/nodes", timeout=10).json()
    p1 = next(int(p.rsplit("-", 1)[1]) for n in body["nodes"] if n["node_id"] == 1 for p in n["partitions"])
    acked = []
    for i in range(30):
        r = httpx.post(f"{c.url(1)}/v1/topics/{TOPIC}/messages",
                       json={"messages": [{"key": "moved", "value": f"m{i}", "partition": p1}]}, timeout=30)
        assert r.status_code == 200
        acked.append(r.json()["results"][0])
    # node 1 hands the partition to node 0 and dies: its index entries for it were only in its local files, so
    # the failover rebuilds them in a file of its own, created seconds after the last of these records
    r = httpx.post(f"{c.url(1)}/v1/admin/reassignments", json={"topic": TOPIC, "partition": p1, "to": 0},
                   timeout=120)
    assert r.status_code == 200, r.text
    assert c.nodes[1].stop(signal.SIGKILL) == -signal.SIGKILL


    wait_until(lambda: "entries" in c.index_rescue(1), 60, "node 1's index entries rebuilt")
    assert c.index_rescue(1)["entries"] == 30
    end = max(a["timestamp"] for a in acked)  # before the rescued file was created
    want = sorted((p1, a["offset"]) for a in acked)
    assert sorted(_by_key(c.url(0), "moved", end, 500)) == want
    assert sorted(_by_key(c.url(0), "moved", end, 7)) == want  # cursor pages: each round's end is lower still


def test_a_departed_nodes_published_files_are_read_only_where_their_key_filter_holds_the_key(
        tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str], closing: list[Any]) -> None:
    meta_url = pg_url()
    store_url = seaweedfs.store_url("mqindex", f"filters-{uuid.uuid4().hex[:8]}")
    clock = ManualClock()
    dead = IndexService.open(tmp_path / "node7", store=store_url, remote_prefix="index-node-7/", clock=clock,
                             maintain_interval_s=0, slots=64, max_items=1000)
    closing.append(dead)
    for f in range(12):  # twelve uploaded files, each with keys of its own
        for i in range(5):
            dead.put(TOPIC, 0, f * 5 + i, 10, [f"key-{f}-{i}"], clock.now + i)
        dead.flush()
        assert dead.compact_now() is not None
        clock.advance(1000)
    dead.maintain()
    uploaded = {f.location: f for f in dead.files() if f.items and f.state is FileState.UPLOADED}
    assert len(uploaded) == 12
    meta7 = MetadataClient(meta_url, 7)
    closing.append(meta7)
    publish_files(meta7, 7, index_file_rows(dead))
    dead.close()

    index, meta0 = node0_lookups(tmp_path, store_url, meta_url, clock, closing)
    meta0.catch_up()

    hits = index.query(TOPIC, "key-7-3", 10, 0, None)
    assert [h.offset for h in hits] == [38]
    holder = next(loc for loc, f in uploaded.items() if f.min_ms <= clock.now - 5000 + 3 <= f.end_ms)
    assert list(index._readers) == [holder]  # only the file whose filter holds the key was opened
    assert index.query(TOPIC, "no-such-key", 10, 0, None) == []
    assert list(index._readers) == [holder]  # an absent key opens no file
