"""A failover pending on one survivor (its replay of the dead node's WAL interrupted: the WAL store does not answer)
is left to that survivor by a node that becomes the failover leader meanwhile (a node of a lower id joins): that
node does not fail the dead node over again for its index claims, which took no partition and deleted the WAL the
first survivor still had to replay. Once the store answers, the first survivor serves every record the dead node
acknowledged.

Three nodes in this process on one SQLite metadata database, a local object store and a shared WAL in an SQLite
blob store; a node "dies" by no longer renewing its lease nor reconciling."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import broker.cluster.failover as failover_module
from broker.cluster.failover import Failover
from broker.partitions.client_messages import InMessage
from storage_tier.errors import StorageUnavailable
from tests.cluster.conftest import InProcessNodes
from tests.cluster.harness import wait_until


def test_a_failover_pending_on_one_survivor_is_left_to_it_by_a_new_failover_leader(
        nodes: InProcessNodes, monkeypatch: pytest.MonkeyPatch) -> None:
    dead = nodes.open(2, shared_wal=True)
    dead.create_topic("t", 1)
    values = [b"v%02d" % i for i in range(20)]
    dead.produce("t", [InMessage(v, key=b"k") for v in values])  # keys: the node holds index claims
    survivor = nodes.open(1, shared_wal=True)
    outage = threading.Event()
    outage.set()
    failed_reads: list[int] = []
    real_read_wal = failover_module.read_wal

    def read_wal(*args: Any, **kw: Any) -> Any:
        if outage.is_set():
            failed_reads.append(1)
            raise StorageUnavailable("sqlite", None, "the WAL store did not answer")
        return real_read_wal(*args, **kw)

    taken: list[tuple[int, int]] = []
    real_take_over = Failover.take_over

    def take_over(self: Failover, node: int, *args: Any) -> dict[str, Any]:
        taken.append((self.parts.node_id, node))
        return real_take_over(self, node, *args)

    looks_as_leader: list[int] = []
    real_check = Failover.check

    def check(self: Failover) -> None:
        real_check(self)
        if self.parts.node_id == 0 and self.membership.steady():
            looks_as_leader.append(1)

    monkeypatch.setattr(failover_module, "read_wal", read_wal)
    monkeypatch.setattr(Failover, "take_over", take_over)
    monkeypatch.setattr(Failover, "check", check)
    nodes.dies(dead)
    wait_until(lambda: (1, 2) in taken and len(failed_reads) >= 2, 60, "node 1's failover of node 2 interrupted twice")
    leader = nodes.open(0, shared_wal=True)  # the lowest id: the failover leader from now on
    wait_until(lambda: len(looks_as_leader) >= 6, 60, "node 0 looked several times as the failover leader")
    assert (0, 2) not in taken, "node 0 failed node 2 over again while node 1's failover of it was pending"
    outage.clear()
    wait_until(lambda: survivor.partition_info("t", 0)["owned"] or leader.partition_info("t", 0)["owned"], 60,
           "the dead node's partition served")
    assert [m.value for m in survivor.fetch("t", 0, 0, 100)[0]] == values
