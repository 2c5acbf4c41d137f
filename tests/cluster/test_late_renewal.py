"""A node whose lease renewal comes late, but comes before the others fence it, is not failed over: the failover
leader asks for the lease again just before it fences, and a verdict counts a lease only up to when its rows were
asked for. Before, a verdict was as old as the work done since it was given (the published files' expiry, the
leaders, the metadata's catch-up), and a node that had renewed meanwhile was fenced while serving.

Two nodes in this process on one SQLite metadata database and a local object store (tests/cluster/conftest.py)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from broker.cluster.membership import LeaseObserver
from broker.metadata.leases import ALIVE, EXPIRED, LeaseTable, NodeLease
from broker.partitions.client_messages import InMessage
from tests.cluster.conftest import InProcessNodes

LEASE_MS = 1000


def _row(version: int) -> NodeLease:
    return NodeLease(node_id=1, epoch=0, http=None, kafka=None, expires_ms=version, state=ALIVE, now_ms=0)


def test_a_lease_is_counted_up_to_when_its_row_was_asked_for() -> None:
    now = [0.0]
    observer = LeaseObserver(3000, clock=lambda: now[0])
    observer.judge([_row(1)])  # the first look
    now[0] = 1.0
    assert observer.judge([_row(2)])[0].state == ALIVE  # renewed: seen to change at 1.0
    now[0] = 4.5  # the rows were asked for at 3.9 and the answer judged at 4.5: 2.9 s unchanged, not 3.5
    assert observer.judge([_row(2)], asked_at=3.9)[0].state == ALIVE
    assert observer.judge([_row(2)], asked_at=4.0)[0].state == EXPIRED


def test_a_renewal_that_comes_before_the_fence_keeps_the_node(nodes: InProcessNodes,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    def stalled(*args: Any, **kw: Any) -> bool:
        raise sqlite3.OperationalError("database is locked")

    one = nodes.open(1, lease_ms=LEASE_MS)
    one.create_topic("t", 1)  # led by node 1
    zero = nodes.open(0, lease_ms=LEASE_MS)
    renew = one.cluster.membership.leases.heartbeat
    failover = zero.cluster.failover
    assert failover is not None
    real_take_over = failover.take_over
    came: list[int] = []

    def renewal_comes_first(dead: int, *args: Any) -> dict[str, Any]:
        """Node 1's renewal comes through once node 0 has decided to fail it over, before node 0 fences it."""
        came.append(dead)
        held = one.cluster.membership.held_until
        monkeypatch.setattr(one.cluster.membership.leases, "heartbeat", renew)
        deadline = time.monotonic() + 10
        while one.cluster.membership.held_until == held:
            assert time.monotonic() < deadline, "node 1 did not renew"
            time.sleep(0.01)
        return real_take_over(dead, *args)

    deadline = time.monotonic() + 30
    while not (zero.cluster.membership.steady() and one.cluster.membership.steady()):
        assert time.monotonic() < deadline, "the nodes did not hold their leases"
        time.sleep(0.05)
    monkeypatch.setattr(failover, "take_over", renewal_comes_first)
    with caplog.at_level("WARNING", logger="mqindex.broker.cluster"):
        monkeypatch.setattr(one.cluster.membership.leases, "heartbeat", stalled)
        deadline = time.monotonic() + 30
        while not came:
            assert time.monotonic() < deadline, "node 0 did not decide to fail node 1 over"
            time.sleep(0.02)
        deadline = time.monotonic() + 10
        while not [r for r in caplog.records if r.getMessage() == "failover abandoned: the node renewed its lease"]:
            assert time.monotonic() < deadline, f"node 1 was failed over after it renewed (fenced: " \
                                                f"{one.cluster.membership.fenced})"
            time.sleep(0.02)
    assert came == [1]
    assert not one.cluster.membership.fenced
    assert one.partition_info("t", 0)["owned"]
    deadline = time.monotonic() + 10
    while True:  # its lease lapsed: it acknowledges again once it holds it (at once, here)
        try:
            assert one.produce("t", [InMessage(b"still serving")])[0].offset == 0
            break
        except Exception:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_a_lease_expired_by_a_survivor_is_never_renewed(tmp_path: Path) -> None:
    """The survivor ends the lease only if its row is the version it judged expired; once ended, the node's
    renewal fails (it learns it is fenced) instead of bringing the lease back while its partitions are taken."""
    table = LeaseTable(f"sqlite:///{tmp_path / 'meta.db'}")
    try:
        table.register(1, 0, None, None, LEASE_MS)
        judged = next(n for n in table.nodes() if n.node_id == 1)
        deadline = time.monotonic() + 5
        while (renewed := next(n for n in table.nodes() if n.node_id == 1)).expires_ms == judged.expires_ms:
            assert time.monotonic() < deadline  # renewals are at least 50 ms apart: one in a later millisecond
            assert table.heartbeat(1, 0, LEASE_MS)  # renewed after the survivor's look
        assert not table.expire_if(1, 0, judged.expires_ms)  # the version judged is gone: the node is left alone
        assert table.expire_if(1, 0, renewed.expires_ms)
        assert not table.heartbeat(1, 0, LEASE_MS)  # fenced: no renewal brings it back
        assert next(n for n in table.nodes() if n.node_id == 1).state == EXPIRED
        table.register(1, 1, None, None, LEASE_MS)  # a new incarnation takes the row back
        assert table.heartbeat(1, 1, LEASE_MS)
    finally:
        table.close()
