"""A departed node's published index files and the files a failover rebuilt are merged by the failover leader into
day files (broker/cluster/published_merge.py), on real SeaweedFS and PostgreSQL: lookups answer exactly as before
(every key, with and without a time range), a key of the merged history costs one file read, the inputs are
deleted only after the grace, and the departed node, opened again with its index directory, drops the files that
were merged away. A merge stopped before its commit, or whose list changed meanwhile, leaves nothing behind."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker.cluster.cluster_index import FILES_PREFIX, MERGED_LIST_PREFIX, index_file_rows, publish_files
from broker.cluster.published_merge import MERGES_PREFIX, PublishedMergeConfig, PublishedMerger
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
DAY_MS = 24 * HOUR_MS
GRACE_MS = 10 * 60_000
CONFIG = PublishedMergeConfig(departed_ms=0, grace_ms=GRACE_MS, stale_ms=HOUR_MS)


def _upload(svc: IndexService, partition: int, offsets: range, at_ms: int) -> str:
    """Index `offsets` (key f"k{offset}" each, and "all") stored from `at_ms` into one uploaded file; its key."""
    before = {f.location for f in svc.files()}
    for o in offsets:
        svc.put(TOPIC, partition, o, 10, [f"k{o}", "all"], at_ms + o)
    svc.flush()
    assert svc.compact_now() is not None
    svc.maintain()
    (new,) = [f for f in svc.files() if f.items and f.location not in before and f.state.value == "UPLOADED"]
    return new.location


def _rescue_rows(svc: IndexService) -> str:
    ranges = {loc: rs for loc, _state, rs in svc.offset_ranges()}
    return json.dumps([published_row(f.location, f.begin_ms, f.end_ms or f.begin_ms, f.min_ms, ranges.get(f.location))
                       for f in svc.files() if f.state.value == "UPLOADED"])


class History:
    """Node 7 (departed): four files of entries of two days ago, one of today; a rescue of node 8: three files of
    entries of two days ago. Node 0 looks keys up."""

    def __init__(self, tmp_path: Path, seaweedfs: SeaweedFS, meta_url: str, closing: list[Any]) -> None:
        self.tmp_path, self.closing, self.meta_url = tmp_path, closing, meta_url
        self.store_url = seaweedfs.store_url("mqindex", f"pmerge-{uuid.uuid4().hex[:8]}")
        self.clock = clock = ManualClock(1_700_000_000_000 - 1_700_000_000_000 % DAY_MS + 12 * HOUR_MS)
        self.old = old = clock.now - 2 * DAY_MS
        self.dead = self.open_node7()
        self.dead_old = [_upload(self.dead, 0, range(10 * i, 10 * i + 10), old + i * HOUR_MS) for i in range(4)]
        self.dead_new = _upload(self.dead, 0, range(40, 50), clock.now - HOUR_MS)
        self.meta7 = MetadataClient(meta_url, 7)
        closing.append(self.meta7)
        self.publish_node7()
        rescue = IndexService.open(tmp_path / "rescue", store=self.store_url, remote_prefix="index-rescue-8.3/",
                                   clock=clock, maintain_interval_s=0, slots=64, max_items=1000, merge_tiers_ms=())
        closing.append(rescue)
        self.rescued = [_upload(rescue, 1, range(100 + 10 * i, 110 + 10 * i), old + i * HOUR_MS) for i in range(3)]
        self.meta7.kv_put(f"{RESCUED_PREFIX}8.3", _rescue_rows(rescue))
        rescue.close()
        closing.remove(rescue)
        self.dead.close()
        self.closing.remove(self.dead)
        self.store = open_store(self.store_url)
        closing.append(self.store)
        self.index, self.meta0 = node0_lookups(tmp_path, self.store_url, meta_url, clock, closing)
        self.meter = self.index.index_store.meter

    def open_node7(self) -> IndexService:
        svc = IndexService.open(self.tmp_path / "node7", store=self.store_url, remote_prefix="index-node-7/",
                                clock=self.clock, maintain_interval_s=0, slots=64, max_items=1000, merge_tiers_ms=())
        self.closing.append(svc)
        return svc

    def publish_node7(self, svc: IndexService | None = None) -> None:
        svc = svc or self.dead
        publish_files(self.meta7, 7, index_file_rows(svc), {loc: rs for loc, _state, rs in svc.offset_ranges()})

    def answers(self) -> dict[tuple[str, int, int | None], list[tuple[int, int, int]]]:
        """Every key's answer, with no range and with ranges cutting the history."""
        self.meta0.catch_up()
        old = self.old
        out = {}
        for key in ["all", "absent", *(f"k{o}" for o in (*range(0, 50, 7), *range(100, 130, 7)))]:
            for begin, end in ((0, None), (old + HOUR_MS, old + 2 * HOUR_MS + 5), (old + 3 * HOUR_MS, None)):
                hits = self.index.query(TOPIC, key, 200, begin, end)
                out[(key, begin, end)] = [(h.queue_id, h.offset, h.store_time_ms) for h in hits]
        return out

    def listed(self) -> dict[str, list[str]]:
        return {k: sorted(r[0] for r in json.loads(v)) for p in (FILES_PREFIX, RESCUED_PREFIX, MERGED_LIST_PREFIX)
                for k, v in self.meta0.kv_items(p).items()}

    def gets_of(self, key: str) -> int:
        before = self.meter.snapshot()
        self.meta0.catch_up()
        assert len(self.index.query(TOPIC, key, 10, 0, None)) == 1
        return (self.meter.snapshot() - before)["GET"]


@pytest.fixture
def history(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str], closing: list[Any]) -> History:
    return History(tmp_path, seaweedfs, pg_url(), closing)


def test_departed_and_rescued_files_are_merged_and_answer_as_before(history: History) -> None:
    h = history
    before = h.answers()
    assert len(before[("all", 0, None)]) == 80
    merger = PublishedMerger(h.meta0, h.store, h.clock, CONFIG)
    rep = merger.run_once(alive={0})
    assert len(rep.merged) == 2  # node 7's closed day, the rescue's closed day
    listed = h.listed()
    assert listed[f"{FILES_PREFIX}7"] == [h.dead_new]  # today's file stays as written
    assert f"{RESCUED_PREFIX}8.3" not in listed  # every rescued file merged: the list is gone
    assert len(listed[f"{MERGED_LIST_PREFIX}files.7"]) == 1 and len(listed[f"{MERGED_LIST_PREFIX}rescued.8.3"]) == 1
    assert h.answers() == before  # each entry exactly once, time ranges as exact as before
    # a key of the merged history: its one merged file read (header and summary once, then one ranged GET)
    h.gets_of("k3")
    assert h.gets_of("k13") == 1 and h.gets_of("k25") == 1 and h.gets_of("k111") <= 2
    # within the grace the inputs stay in the store (a lookup that read the lists before still reads them)
    inputs = h.dead_old + h.rescued
    assert all(h.store.exists(k) and h.store.exists(k + FILTER_SUFFIX) for k in inputs)
    assert merger.run_once(alive={0}).released == []
    h.clock.advance(GRACE_MS)
    rep = merger.run_once(alive={0})
    assert sorted(rep.released) == sorted(inputs) and rep.merged == []
    assert not any(h.store.exists(k) or h.store.exists(k + FILTER_SUFFIX) for k in inputs)
    assert h.meta0.kv_items(MERGES_PREFIX) == {}
    assert h.answers() == before
    # node 7 comes back with its index directory: it drops the files merged away instead of serving gone objects
    svc = h.open_node7()
    svc.maintain()
    assert sorted(f.location for f in svc.files() if f.state.value == "UPLOADED") == [h.dead_new]
    assert not any(k.endswith(".merged") for k in h.store.list("index-node-7/"))
    h.publish_node7(svc)
    assert h.answers() == before


def test_a_merge_stopped_before_its_commit_or_raced_by_a_returning_node_leaves_nothing(history: History) -> None:
    h = history
    before = h.answers()
    lists = h.listed()
    merger = PublishedMerger(h.meta0, h.store, h.clock, CONFIG)

    def stop(step: str) -> None:
        raise RuntimeError(f"stopped at {step}")  # the leader stops between the upload and the commit

    merger.hook = stop
    assert merger.run_once(alive={0}).merged == []
    assert h.listed() == lists and h.answers() == before
    prepared = sorted(json.loads(v)["key"] for v in h.meta0.kv_items(MERGES_PREFIX).values())
    assert len(prepared) == 2 and all(h.store.exists(k) for k in prepared)
    calls: list[str] = []

    def node7_rewrites_its_list(step: str) -> None:
        if not calls:  # node 7's list (merged first) is written again between the read and the commit
            body = h.meta7.kv_get(f"{FILES_PREFIX}7")
            assert body is not None
            h.meta7.kv_put(f"{FILES_PREFIX}7", json.dumps(json.loads(body), indent=1))
        calls.append(step)

    merger.hook = node7_rewrites_its_list
    h.clock.advance(HOUR_MS)  # the prepared merges are stale: undone, then made again
    rep = merger.run_once(alive={0})
    assert sorted(rep.undone) == prepared and not any(h.store.exists(k) or h.store.exists(k + FILTER_SUFFIX)
                                                      for k in prepared)
    assert len(calls) == 2 and len(rep.merged) == 1  # the rescue's merge committed, node 7's dropped
    assert h.listed()[f"{FILES_PREFIX}7"] == lists[f"{FILES_PREFIX}7"] and h.answers() == before
    assert not any(k.startswith("index-merged/") and h.store.exists(k) for k in h.store.list("index-merged/")
                   if k.removesuffix(FILTER_SUFFIX) not in rep.merged)
    merger.hook = None
    rep = merger.run_once(alive={0})
    assert len(rep.merged) == 1 and h.answers() == before  # node 7's files merged at the next run

    # node 7 comes back within the grace and publishes its files again: the merge of its files is undone
    svc = h.open_node7()
    h.publish_node7(svc)
    h.clock.advance(GRACE_MS)
    rep = merger.run_once(alive={0, 7})
    assert len(rep.undone) == 1
    assert not h.store.exists(rep.undone[0])
    assert all(h.store.exists(k) for k in h.dead_old)  # node 7 serves them
    assert not any(h.store.exists(k) for k in h.rescued)  # the rescue's merge was released
    assert f"{MERGED_LIST_PREFIX}files.7" not in h.listed() and h.meta0.kv_items(MERGES_PREFIX) == {}
    assert h.answers() == before


def test_a_leader_killed_mid_merge_leaves_the_answers_and_nothing_after_the_undo(history: History) -> None:
    import subprocess
    import sys

    h = history
    before = h.answers()
    lists = h.listed()
    child = subprocess.run([sys.executable, "-m", "tests.cluster.published_merge_child", h.meta_url, h.store_url,
                            str(h.clock.now), "merge:prepared"], timeout=120, capture_output=True)
    assert child.returncode == -9, child.stderr.decode()[-2000:]  # killed after its upload, before the commit
    assert h.listed() == lists and h.answers() == before
    prepared = sorted(json.loads(v)["key"] for v in h.meta0.kv_items(MERGES_PREFIX).values())
    assert len(prepared) == 1 and h.store.exists(prepared[0])
    h.clock.advance(HOUR_MS)
    merger = PublishedMerger(h.meta0, h.store, h.clock, CONFIG)
    rep = merger.run_once(alive={0})  # the next leader: the dead one's merge undone, then the merges made
    assert rep.undone == prepared and not h.store.exists(prepared[0])
    assert len(rep.merged) == 2 and h.answers() == before
    h.clock.advance(GRACE_MS)
    merger.run_once(alive={0})
    merged = {k for k in h.store.list("index-merged/") if not k.endswith(FILTER_SUFFIX)}
    listed = {r for k, v in h.listed().items() if k.startswith(MERGED_LIST_PREFIX) for r in v}
    assert merged == listed and h.meta0.kv_items(MERGES_PREFIX) == {}  # no orphan left
    assert h.answers() == before
