"""A departed node's published index files and the files a failover rebuilt follow retention like every other
index file: past the index-only retention, or once the broker trimmed every offset range in them, the failover
leader removes them from the published lists, then deletes them and their key filters from the store; lookups
no longer return their entries, while the entries of files not expired are still found."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker.cluster.cluster_index import FILES_PREFIX, index_file_rows, publish_files
from broker.cluster.published_expiry import PublishedExpiry
from broker.metadata import MetadataClient
from broker.partitions.index_rescue import RESCUED_PREFIX, published_row
from index_file.key_filter import FILTER_SUFFIX
from index_service import IndexService
from storage_tier import open_store
from storage_tier.seaweedfs_server import SeaweedFS
from tests.cluster.harness import TOPIC
from tests.cluster.test_index_file_times import node0_lookups
from tests.index_service.helpers import ManualClock

HOUR_MS = 3_600_000




def _upload(svc: IndexService, partition: int, offsets: range, at_ms: int) -> str:
    """Index `offsets` of key "k" stored at `at_ms` into one file of its own, uploaded; its store key."""
    before = {f.location for f in svc.files()}
    for o in offsets:
        svc.put(TOPIC, partition, o, 10, ["k"], at_ms + o)
    svc.flush()
    assert svc.compact_now() is not None
    svc.maintain()
    (new,) = [f for f in svc.files() if f.items and f.location not in before and f.state.value == "UPLOADED"]
    return new.location


def _publish(meta: MetadataClient, svc: IndexService, key: str | None = None) -> None:
    ranges = {loc: rs for loc, _state, rs in svc.offset_ranges()}
    if key is None:
        publish_files(meta, meta.node_id, index_file_rows(svc), ranges)
    else:  # as a failover's rescue publishes
        rows = [published_row(f.location, f.begin_ms, f.end_ms or f.begin_ms, f.min_ms, ranges.get(f.location))
                for f in svc.files() if f.state.value == "UPLOADED"]
        meta.kv_put(key, json.dumps(rows))


def test_departed_and_rescued_files_expire_by_retention(
        tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str], closing: list[Any]) -> None:
    meta_url = pg_url()
    store_url = seaweedfs.store_url("mqindex", f"expiry-{uuid.uuid4().hex[:8]}")
    clock = ManualClock()
    old = clock.now - 2 * HOUR_MS
    # node 7, departed: a file of entries two hours old, one of entries from now
    dead = IndexService.open(tmp_path / "node7", store=store_url, remote_prefix="index-node-7/", clock=clock,
                             maintain_interval_s=0, slots=64, max_items=1000)
    closing.append(dead)
    dead_old = _upload(dead, 0, range(0, 5), old)
    dead_new = _upload(dead, 0, range(5, 10), clock.now)
    meta7 = MetadataClient(meta_url, 7)
    closing.append(meta7)
    _publish(meta7, dead)
    # a failover's rescue of node 8: partition 1 (which the broker keeps) and partition 2 (which it trimmed)
    rescue = IndexService.open(tmp_path / "rescue", store=store_url, remote_prefix="index-rescue-8.3/", clock=clock,
                               maintain_interval_s=0, slots=64, max_items=1000)
    closing.append(rescue)
    rescued_kept = _upload(rescue, 1, range(100, 105), clock.now)
    rescued_trimmed = _upload(rescue, 2, range(200, 205), clock.now)
    _publish(meta7, rescue, f"{RESCUED_PREFIX}8.3")
    dead.close()
    rescue.close()
    closing.remove(dead)
    closing.remove(rescue)
    every = [dead_old, dead_new, rescued_kept, rescued_trimmed]
    store = seaweedfs_store(store_url)
    closing.append(store)
    assert all(store.exists(k) and store.exists(k + FILTER_SUFFIX) for k in every)

    index, meta0 = node0_lookups(tmp_path, store_url, meta_url, clock, closing)

    def found() -> list[tuple[int, int]]:
        meta0.catch_up()
        return sorted((h.queue_id, h.offset) for h in index.query(TOPIC, "k", 100, 0, None))

    assert found() == [(0, o) for o in range(10)] + [(1, o) for o in range(100, 105)] + \
        [(2, o) for o in range(200, 205)]

    def broker_stores(topic: str, partition: int, max_offset: int) -> bool:
        return not (topic == TOPIC and partition == 2)  # the broker's retention trimmed partition 2 entirely

    # one hour of index-only retention: the file of two-hour-old entries is past it, nothing else is
    expiry = PublishedExpiry(meta0, store, broker_stores, HOUR_MS, clock, interval_s=0)
    assert sorted(expiry.run_once(alive={0})) == sorted([dead_old, rescued_trimmed])
    for k in (dead_old, rescued_trimmed):
        assert not store.exists(k) and not store.exists(k + FILTER_SUFFIX)
    for k in (dead_new, rescued_kept):
        assert store.exists(k) and store.exists(k + FILTER_SUFFIX)
    listed = {r[0] for v in [*meta0.kv_items(FILES_PREFIX).values(), *meta0.kv_items(RESCUED_PREFIX).values()]
              for r in json.loads(v)}
    assert listed == {dead_new, rescued_kept}
    assert found() == [(0, o) for o in range(5, 10)] + [(1, o) for o in range(100, 105)]
    # later, past the retention of every file: the lists are emptied and removed
    clock.advance(2 * HOUR_MS)
    assert sorted(expiry.run_once(alive={0})) == sorted([dead_new, rescued_kept])
    assert meta0.kv_items(f"{FILES_PREFIX}7") == {} and meta0.kv_items(RESCUED_PREFIX) == {}
    assert found() == []
    assert not any(store.exists(k) or store.exists(k + FILTER_SUFFIX) for k in every)


def test_a_live_nodes_files_are_left_to_its_own_index(
        tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str], closing: list[Any]) -> None:
    meta_url = pg_url()
    store_url = seaweedfs.store_url("mqindex", f"expiry-{uuid.uuid4().hex[:8]}")
    clock = ManualClock()
    svc = IndexService.open(tmp_path / "node5", store=store_url, remote_prefix="index-node-5/", clock=clock,
                            maintain_interval_s=0, slots=64, max_items=1000)
    closing.append(svc)
    loc = _upload(svc, 0, range(0, 3), clock.now - 5 * HOUR_MS)
    meta5 = MetadataClient(meta_url, 5)
    closing.append(meta5)
    _publish(meta5, svc)
    store = seaweedfs_store(store_url)
    closing.append(store)
    expiry = PublishedExpiry(meta5, store, lambda t, q, o: True, HOUR_MS, clock, interval_s=0)
    assert expiry.run_once(alive={0, 5}) == []  # node 5 is alive: its own index service expires its files
    assert store.exists(loc)


def seaweedfs_store(url: str) -> Any:
    return open_store(url)
