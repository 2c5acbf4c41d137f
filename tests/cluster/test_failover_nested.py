"""A node that dies in the middle of failing another over (it fenced the other, recorded the replay, and died before
it made itself the leader of the other's partitions) is failed over in turn; that failover replays both WALs into
what it takes, and keeps the WAL and the replay record of the first dead node, which still leads its partitions:
the next failover, of that node, replays its WAL and serves every record it acknowledged. Before, the second
failover deleted the first dead node's WAL and record, and its acknowledged records were lost.

Three nodes in this process on one SQLite metadata database, a local object store and a shared WAL in an SQLite
blob store; a node "dies" by no longer renewing its lease nor reconciling."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import broker.cluster.failover as failover_module
from broker.node import BrokerNode
from broker.partitions.client_messages import InMessage
from tests.cluster.conftest import InProcessNodes
from tests.cluster.harness import wait_until

VALUES = [b"y%02d" % i for i in range(20)]


def node_0_stops_failing_node_2_over(nodes: InProcessNodes, monkeypatch: pytest.MonkeyPatch
                                     ) -> tuple[BrokerNode, BrokerNode]:
    """Nodes 2 (partition y, VALUES only in its WAL), 0 (partition x) and 1; node 2 dies, and node 0, the failover
    leader, fences it, records the replay and stops before it leads y (its lease still renewed).
    Returns (node 0, node 1)."""
    first = nodes.open(2, shared_wal=True)  # dies first
    first.create_topic("y", 1)
    first.produce("y", [InMessage(v, key=b"k") for v in VALUES])
    middle = nodes.open(0, shared_wal=True)  # the lowest id: fails node 2 over, dies doing it
    middle.create_topic("x", 1)
    if middle.partition_info("x", 0)["owned"] is False:
        middle.reassign("x", 0, 0)
    middle.produce("x", [InMessage(b"x", key=b"k")])
    survivor = nodes.open(1, shared_wal=True)
    died = threading.Event()
    real_set_leaders = failover_module.set_leaders

    def dies_before_leading(meta: Any, changes: Any) -> Any:
        if meta.node_id == 0:
            died.set()
            raise RuntimeError("node 0 stops here")
        return real_set_leaders(meta, changes)

    monkeypatch.setattr(failover_module, "set_leaders", dies_before_leading)
    nodes.dies(first)
    assert died.wait(60), "node 0 never began the failover of node 2"
    return middle, survivor


def test_a_failover_of_a_node_that_died_failing_another_over_keeps_the_first_ones_wal(
        nodes: InProcessNodes, monkeypatch: pytest.MonkeyPatch) -> None:
    middle, survivor = node_0_stops_failing_node_2_over(nodes, monkeypatch)
    nodes.dies(middle)
    wait_until(lambda: survivor.partition_info("y", 0)["owned"] and survivor.partition_info("x", 0)["owned"], 60,
           "node 1 serves both dead nodes' partitions")
    assert [m.value for m in survivor.fetch("y", 0, 0, 100)[0]] == VALUES
    assert [m.value for m in survivor.fetch("x", 0, 0, 100)[0]] == [b"x"]


def test_a_node_restarted_after_its_failover_was_begun_by_a_node_that_died_leaves_no_replay_pending(
        nodes: InProcessNodes, monkeypatch: pytest.MonkeyPatch) -> None:
    """Node 0 fences node 2, records its replay and dies before it leads node 2's partition; node 2 starts again
    and takes its partition back with its WAL's records; node 1 fails node 0 over. Node 2 is alive: no failover of
    it comes, so node 1 drops its replay record. Before, node 1 kept it for that failover, and the record held the
    balancer and every move of node 2's partitions back for good."""
    middle, survivor = node_0_stops_failing_node_2_over(nodes, monkeypatch)
    back = nodes.open(2, shared_wal=True, dir_name="node2-again")  # before node 1 fails node 0 over
    nodes.dies(middle)
    wait_until(lambda: survivor.partition_info("x", 0)["owned"] or back.partition_info("x", 0)["owned"], 60,
               "node 0's partition served again")
    assert back.partition_info("y", 0)["owned"], "node 2 did not take its partition back at its restart"
    assert [m.value for m in back.fetch("y", 0, 0, 100)[0]] == VALUES
    wait_until(lambda: survivor.meta.kv_get(f"{failover_module.REPLAYS_PREFIX}2") is None, 30,
               "node 2's replay record dropped (no failover of it will come: it is alive)")
    assert not survivor.meta.kv_items(failover_module.REPLAYS_PREFIX)
    moved = survivor.reassign("y", 0, 1)  # a move of node 2's partition is not held back by a stale replay
    assert (moved["from"], moved["to"]) == (2, 1), moved
    wait_until(lambda: survivor.partition_info("y", 0)["owned"], 30, "node 1 serves the moved partition")
    assert [m.value for m in survivor.fetch("y", 0, 0, 100)[0]] == VALUES
