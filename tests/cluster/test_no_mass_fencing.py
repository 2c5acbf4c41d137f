"""When the metadata database stalls for longer than a lease, every node's lease runs out at once. The first node
to renew afterwards must not take that for the others' failure: they get a lease's time to renew theirs before
any is failed over. Before, the first node back fenced every other node (they then had to be restarted).

Two nodes in this process on one SQLite metadata database and a local object store; the stall is their lease
renewals failing, node 0's recovering first."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import pytest

from broker.metadata.leases import EXPIRED, LeaseTable
from broker.partitions.client_messages import InMessage
from tests.cluster.conftest import InProcessNodes

LEASE_MS = 1000


def test_a_stall_of_the_database_fences_nobody(nodes: InProcessNodes, monkeypatch: pytest.MonkeyPatch) -> None:
    def stalled(*args: Any, **kw: Any) -> bool:
        raise sqlite3.OperationalError("database is locked")

    one = nodes.open(1, lease_ms=LEASE_MS)
    one.create_topic("t", 1)  # led by node 1
    zero = nodes.open(0, lease_ms=LEASE_MS)
    renew0, renew1 = zero.cluster.membership.leases.heartbeat, one.cluster.membership.leases.heartbeat
    monkeypatch.setattr(zero.cluster.membership.leases, "heartbeat", stalled)
    monkeypatch.setattr(one.cluster.membership.leases, "heartbeat", stalled)
    table = LeaseTable(nodes.meta)
    try:
        deadline = time.monotonic() + 30
        while {n.node_id for n in table.nodes() if n.state == EXPIRED} != {0, 1}:
            assert time.monotonic() < deadline, "the leases did not run out"
            time.sleep(0.05)
    finally:
        table.close()
    monkeypatch.setattr(zero.cluster.membership.leases, "heartbeat", renew0)  # node 0 is back first
    held = zero.cluster.membership.held_until
    deadline = time.monotonic() + 30
    while zero.cluster.membership.held_until == held:
        assert time.monotonic() < deadline, "node 0 did not renew"
        time.sleep(0.02)
    time.sleep(LEASE_MS / 1000 / 2)  # node 1 renews half a lease later
    monkeypatch.setattr(one.cluster.membership.leases, "heartbeat", renew1)
    time.sleep(2 * LEASE_MS / 1000)  # failover checks run twice a second meanwhile
    assert not one.cluster.membership.fenced, "node 1 was fenced after the database's stall"
    assert one.partition_info("t", 0)["owned"]
    assert one.produce("t", [InMessage(b"still serving")])[0].offset == 0
