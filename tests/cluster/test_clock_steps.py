"""Leases survive a step of a clock, either direction, on the database host and on a node; a node that really
died is still failed over within a lease and a bound.

Before, the lease code compared `expires_ms` with the database server's clock: a forward step made every lease
look expired at once (the failover leader fenced the other nodes), a backward step kept a node that died just then
alive for the length of the step. Now each node watches the lease rows change on its own monotonic clock.

Two nodes in this process on one SQLite metadata database and a shared WAL. The database host's clock is the
SQL expression the lease table computes `now` with (LeaseTable._now, the one place the lease code reads that
clock); stepping it means every lease table on that database reads the stepped clock. A node's wall clock is
`time.time` and the node's injected clock (its append times)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from broker.metadata import leases
from broker.metadata.leases import ALIVE
from broker.node import BrokerNode
from broker.partitions.client_messages import InMessage
from tests.cluster.conftest import InProcessNodes

LEASE_MS = 1000
STEP_MS = 5 * 60_000  # five minutes
BOUND_S = 5.0  # failover of a dead node: within the lease and this


def step_database_clock(*members: BrokerNode, offset_ms: int) -> None:
    """The database host's clock now reads real time + offset_ms for every lease table of these nodes."""
    for n in members:
        n.cluster.membership.leases._now = f"({leases._SQLITE_NOW} + ({offset_ms}))"


def wait_steady(*members: BrokerNode) -> None:
    deadline = time.monotonic() + 30
    while not all(n.cluster.membership.steady() for n in members):
        assert time.monotonic() < deadline, "the nodes did not hold their leases"
        time.sleep(0.05)


def watch_leases(viewer: BrokerNode, seconds: float) -> Iterator[dict[int, str]]:
    """The viewer's verdict on every lease, looked at every 20 ms for `seconds`."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        yield {n.node_id: n.state for n in viewer.cluster.membership.nodes()}
        time.sleep(0.02)


@pytest.fixture
def two(nodes: InProcessNodes) -> tuple[BrokerNode, BrokerNode]:
    one = nodes.open(1, lease_ms=LEASE_MS, shared_wal=True)
    one.create_topic("t", 1)  # led by node 1; node 0 (lowest id) is the failover leader
    zero = nodes.open(0, lease_ms=LEASE_MS, shared_wal=True)
    wait_steady(zero, one)
    return zero, one


def assert_still_serving(zero: BrokerNode, one: BrokerNode, offset: int) -> None:
    assert not zero.cluster.membership.fenced and not one.cluster.membership.fenced, "a lease was lost"
    assert zero.cluster.failover.done == [], "a failover was triggered"
    assert one.partition_info("t", 0)["owned"], "node 1 lost its partition"
    assert one.produce("t", [InMessage(b"after the step")])[0].offset == offset


def test_database_clock_steps_forward_then_back(two: tuple[BrokerNode, BrokerNode]) -> None:
    zero, one = two
    for n, offset_ms in enumerate((STEP_MS, -STEP_MS, 0)):  # forward 5 min, back 10 min, forward 5 min
        step_database_clock(zero, one, offset_ms=offset_ms)
        for seen in watch_leases(zero, 3 * LEASE_MS / 1000):  # failover checks run twice a second meanwhile
            assert seen == {0: ALIVE, 1: ALIVE}, f"after a step of {offset_ms} ms node 0 sees {seen}"
        assert_still_serving(zero, one, n)


def test_node_wall_clock_steps_forward_then_back(two: tuple[BrokerNode, BrokerNode],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    zero, one = two
    real = time.time
    for n, offset_s in enumerate((STEP_MS / 1000, -STEP_MS / 1000)):
        monkeypatch.setattr(time, "time", lambda o=offset_s: real() + o)
        one.clock = lambda o=offset_s: int((real() + o) * 1000)
        for seen in watch_leases(zero, 3 * LEASE_MS / 1000):
            assert seen == {0: ALIVE, 1: ALIVE}, f"after a step of {offset_s} s node 0 sees {seen}"
        assert_still_serving(zero, one, n)


@pytest.mark.parametrize("offset_ms", [-STEP_MS, STEP_MS], ids=["back", "forward"])
def test_a_dead_node_is_failed_over_across_a_database_clock_step(two: tuple[BrokerNode, BrokerNode],
                                                                 offset_ms: int) -> None:
    zero, one = two
    one.produce("t", [InMessage(b"before", key=b"k")])
    InProcessNodes.dies(one)
    died = time.monotonic()
    step_database_clock(zero, one, offset_ms=offset_ms)
    deadline = died + LEASE_MS / 1000 + BOUND_S
    while not zero.partition_info("t", 0)["owned"]:
        assert time.monotonic() < deadline, f"node 1 was not failed over within the lease + {BOUND_S} s"
        time.sleep(0.05)
    assert zero.produce("t", [InMessage(b"after")])[0].offset == 1
