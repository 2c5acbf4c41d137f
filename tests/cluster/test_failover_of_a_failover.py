"""A survivor that dies in the middle of failing another node over (before that node's shared WAL is replayed):
whoever fails the survivor over replays both WALs, the first dead node's before the survivor's, so every record
the first node acknowledged is served. Before, the first node's WAL was never replayed by anyone.

Three nodes in this process on one SQLite metadata database, a local object store and a shared WAL in an SQLite
blob store; a node "dies" by no longer renewing its lease nor reconciling."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import broker.cluster.failover as failover_module
from broker.node import BrokerNode
from broker.partitions.client_messages import InMessage
from storage_tier.errors import StorageUnavailable

LEASE_MS = 1000


def dies(node: BrokerNode) -> None:
    node.cluster.stop_watching()
    node.cluster.membership._beat.stop()


def test_the_wal_a_dead_survivor_was_replaying_is_replayed_by_the_next(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    store, meta, wal = f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/meta.sqlite", \
        f"sqlite:///{tmp_path}/wal.sqlite"

    def open_node(node_id: int) -> BrokerNode:
        return BrokerNode.open(tmp_path / f"node{node_id}", store, meta, node_id=node_id, lease_ms=LEASE_MS,
                               upload_interval_s=3600, maintenance_interval_s=3600, wal_url=wal)

    real_read_wal = failover_module.read_wal
    unavailable: list[int] = []  # the WAL reads refused while the second node fails the first over

    def read_wal(store_: Any, node_id: int, *args: Any, **kw: Any) -> Any:
        if refusing:
            unavailable.append(node_id)
            raise StorageUnavailable("sqlite", None, "the WAL store did not answer")
        return real_read_wal(store_, node_id, *args, **kw)

    monkeypatch.setattr(failover_module, "read_wal", read_wal)
    refusing = True
    nodes: list[BrokerNode] = []
    try:
        first = open_node(2)
        nodes.append(first)
        first.create_topic("t", 1)
        first.produce("t", [InMessage(b"m%02d" % i) for i in range(20)])
        dies(first)  # its 20 records only in its shared WAL
        second = open_node(1)
        nodes.append(second)
        deadline = time.monotonic() + 60
        while 2 not in unavailable:  # the second node fenced the first and tries to replay its WAL
            assert time.monotonic() < deadline, "the second node never failed the first over"
            time.sleep(0.02)
        assert not second.partition_info("t", 0)["owned"]
        dies(second)  # in the middle of that failover
        refusing = False
        third = open_node(0)
        nodes.append(third)
        deadline = time.monotonic() + 60
        while not third.partition_info("t", 0)["owned"]:
            assert time.monotonic() < deadline, "nobody served the partition"
            time.sleep(0.05)
        messages, _ = third.fetch("t", 0, 0, 100)
        assert [m.value for m in messages] == [b"m%02d" % i for i in range(20)]
        assert third.produce("t", [InMessage(b"after")])[0].offset == 20
    finally:
        for n in reversed(nodes):
            n.close()
