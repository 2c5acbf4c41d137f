"""A survivor that dies in the middle of failing another node over (before that node's shared WAL is replayed):
whoever fails the survivor over replays both WALs, the first dead node's before the survivor's, so every record
the first node acknowledged is served. Before, the first node's WAL was never replayed by anyone.

Three nodes in this process on one SQLite metadata database, a local object store and a shared WAL in an SQLite
blob store; a node "dies" by no longer renewing its lease nor reconciling."""

from __future__ import annotations

import time
from typing import Any

import pytest

import broker.cluster.failover as failover_module
from broker.partitions.client_messages import InMessage
from storage_tier.errors import StorageUnavailable
from tests.cluster.conftest import InProcessNodes


def test_the_wal_a_dead_survivor_was_replaying_is_replayed_by_the_next(nodes: InProcessNodes,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    real_read_wal = failover_module.read_wal
    unavailable: list[int] = []  # the WAL reads refused while the second node fails the first over
    refusing = [True]

    def read_wal(store_: Any, node_id: int, *args: Any, **kw: Any) -> Any:
        if refusing[0]:
            unavailable.append(node_id)
            raise StorageUnavailable("sqlite", None, "the WAL store did not answer")
        return real_read_wal(store_, node_id, *args, **kw)

    monkeypatch.setattr(failover_module, "read_wal", read_wal)
    first = nodes.open(2, shared_wal=True)
    first.create_topic("t", 1)
    first.produce("t", [InMessage(b"m%02d" % i) for i in range(20)])
    nodes.dies(first)  # its 20 records only in its shared WAL
    second = nodes.open(1, shared_wal=True)
    deadline = time.monotonic() + 60
    while 2 not in unavailable:  # the second node fenced the first and tries to replay its WAL
        assert time.monotonic() < deadline, "the second node never failed the first over"
        time.sleep(0.02)
    assert not second.partition_info("t", 0)["owned"]
    nodes.dies(second)  # in the middle of that failover
    refusing[0] = False
    third = nodes.open(0, shared_wal=True)
    deadline = time.monotonic() + 60
    while not third.partition_info("t", 0)["owned"]:
        assert time.monotonic() < deadline, "nobody served the partition"
        time.sleep(0.05)
    messages, _ = third.fetch("t", 0, 0, 100)
    assert [m.value for m in messages] == [b"m%02d" % i for i in range(20)]
    assert third.produce("t", [InMessage(b"after")])[0].offset == 20
