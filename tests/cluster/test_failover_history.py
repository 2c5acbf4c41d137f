"""GET /v1/cluster/failovers lists what each failover did: a node failed over several times shows one report per
failover, newest first, and the history kept per node is bounded."""

from __future__ import annotations

import json
import signal
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from broker.cluster.failover_history import (
    FAILOVER_HISTORY_PER_NODE,
    failover_reports,
    record_failover,
)
from broker.metadata import MetadataClient
from storage_tier.seaweedfs_server import SeaweedFS
from tests.api.server import free_port
from tests.cluster.harness import TOPIC, Cluster, wait_until

FAILOVERS = 3


def _reports(c: Cluster, via: int = 0) -> list[dict[str, Any]]:
    return list(httpx.get(f"{c.url(via)}/v1/cluster/failovers", timeout=10).json()["failovers"])


def _led_by(c: Cluster, node: int) -> list[str]:
    return c.leaders().get(node, [])


def test_a_node_failed_over_several_times_shows_each_failover_newest_first(
        tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> None:
    prefix = f"history-{uuid.uuid4().hex[:8]}"
    c = Cluster(tmp_path, seaweedfs.store_url("mqindex", prefix), pg_url(),
                "--wal", seaweedfs.store_url("mqindex", prefix + "-wal"))
    try:
        c.start(0)
        c.start(1)
        assert httpx.post(f"{c.url(0)}/v1/topics", json={"name": TOPIC, "partitions": 2},
                          timeout=60).status_code == 201
        for k in range(1, FAILOVERS + 1):
            if not _led_by(c, 1):  # a restarted node leads nothing until a partition is moved to it
                r = httpx.post(f"{c.url(0)}/v1/admin/reassignments", json={"topic": TOPIC, "partition": 0, "to": 1},
                               timeout=120)
                assert r.status_code == 200, r.text
            wait_until(lambda: bool(_led_by(c, 1)), 60, "node 1 leads a partition")
            led = int(_led_by(c, 1)[0].rsplit("-", 1)[1])
            r = httpx.post(f"{c.url(1)}/v1/topics/{TOPIC}/messages",
                           json={"messages": [{"key": "k", "value": f"v{k}", "partition": led}]}, timeout=60)
            assert r.status_code == 200, r.text
            assert c.nodes[1].stop(signal.SIGKILL) == -signal.SIGKILL
            wait_until(lambda k=k: len([f for f in _reports(c) if f["node"] == 1]) >= k, 60,  # type: ignore[misc]
                       f"failover {k} of node 1 reported")
            c.nodes[1].port = free_port()  # the same data directory comes back, a new incarnation
            c.nodes[1].start()
        reports = [f for f in _reports(c) if f["node"] == 1]
        assert len(reports) == FAILOVERS, reports
        epochs = [f["fenced_epoch"] for f in reports]
        assert epochs == sorted(set(epochs), reverse=True), epochs  # one per failover, newest first
        assert [f["at_ms"] for f in reports] == sorted((f["at_ms"] for f in reports), reverse=True)
        assert all(f["by"] == 0 and f["partitions"] for f in reports)
        assert _reports(c, via=1) == _reports(c, via=0)  # every node answers the same
    finally:
        c.stop_all()


def _report(node: int, epoch: int, at_ms: int) -> dict[str, Any]:
    return {"node": node, "fenced_epoch": epoch, "by": 0, "at_ms": at_ms, "wal": "shared", "partitions": []}


def test_the_history_kept_per_node_is_bounded(tmp_path: Path) -> None:
    """Past the bound the oldest reports of that node go, in the same metadata transaction; other nodes' stay.
    A report of the previous version (one key per node, `failovers/<node>`) counts as that node's oldest."""
    with MetadataClient(f"sqlite:///{tmp_path}/meta.sqlite", 0) as meta:
        meta.kv_put("failovers/1", json.dumps(_report(1, 1, 500)))  # as the previous version wrote it
        record_failover(meta, _report(2, 3, 900))
        for i in range(FAILOVER_HISTORY_PER_NODE + 5):
            record_failover(meta, _report(1, 2 + i, 1000 + i))
        kept = [f for f in failover_reports(meta) if f["node"] == 1]
        assert len(kept) == FAILOVER_HISTORY_PER_NODE
        newest = 2 + FAILOVER_HISTORY_PER_NODE + 4
        assert [f["fenced_epoch"] for f in kept] == list(range(newest, newest - FAILOVER_HISTORY_PER_NODE, -1))
        assert "failovers/1" not in meta.kv_items("failovers/")
        assert [f["node"] for f in failover_reports(meta) if f["node"] != 1] == [2]
        record_failover(meta, _report(1, 100, 5000), keep=3)  # a smaller bound prunes down to it
        assert [f["fenced_epoch"] for f in failover_reports(meta) if f["node"] == 1] == [100, newest, newest - 1]
