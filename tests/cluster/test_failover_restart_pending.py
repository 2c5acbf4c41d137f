"""A node restarted while its failover is still pending on a survivor (the survivor's replay of its shared WAL
failed and is retried) loses nothing of either incarnation.

- Its restart keeps in its WAL the records the survivor has yet to read. Before, it let them go at its first
  upload (their streams were no longer its own), the survivor's retry found them gone and served the partition
  without them.
- The survivor's replay leaves the WAL objects of the node that registered again alone. Before, it deleted every
  object it had listed, the new incarnation's among them, and the records that incarnation acknowledged were lost
  when it died in turn.

Two nodes in this process on one SQLite metadata database, a local object store and a shared WAL in an SQLite
blob store; a node dies as a killed one does for the others (no more lease renewals), its records only in its
WAL (uploads wait for the test)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import broker.cluster.failover as failover_module
from broker.node import BrokerNode
from broker.partitions.client_messages import InMessage
from storage_tier.errors import StorageUnavailable
from tests.cluster.conftest import InProcessNodes
from tests.cluster.harness import wait_until


def values(node: BrokerNode, topic: str) -> list[bytes]:
    messages, _ = node.fetch(topic, 0, 0, 1000)
    return [m.value for m in messages]


def test_a_restart_during_its_pending_failover_keeps_both_incarnations_records(
        nodes: InProcessNodes, monkeypatch: pytest.MonkeyPatch) -> None:
    dead = nodes.open(1, shared_wal=True)
    dead.create_topic("t", 1)
    first = [b"m%02d" % i for i in range(20)]
    assert [p.offset for p in dead.produce("t", [InMessage(v, key=b"k") for v in first])] == list(range(20))
    nodes.dies(dead)

    replay_allowed = threading.Event()
    refused: list[bool] = []
    real_read_wal = failover_module.read_wal

    def read_wal_when_allowed(*args: Any, **kw: Any) -> Any:
        if not replay_allowed.is_set():
            refused.append(True)
            raise StorageUnavailable("sqlite", None, "the WAL store did not answer")
        return real_read_wal(*args, **kw)

    monkeypatch.setattr(failover_module, "read_wal", read_wal_when_allowed)
    survivor = nodes.open(0, shared_wal=True)
    wait_until(lambda: bool(refused) and survivor.meta.kv_get(f"{failover_module.REPLAYS_PREFIX}1") is not None, 60,
               "the survivor's failover of node 1 begins its replay")

    # node 1 starts again (its data directory elsewhere: the shared WAL is all it needs) while the survivor
    # still has to read its WAL, then acknowledges records of a partition of its own, only in its WAL
    back = nodes.open(1, shared_wal=True, dir_name="node1-again")
    back.create_topic("u", 1)
    second = [b"n%02d" % i for i in range(10)]
    assert [p.offset for p in back.produce("u", [InMessage(v, key=b"j") for v in second])] == list(range(10))

    back.storage.force_upload()  # an upload trims the WAL of what no longer holds it
    held = back.storage.holds.ids()  # the first incarnation's streams, for the survivor to replay
    assert held and not back.storage.holds.lent_ids(), held
    replay_allowed.set()
    wait_until(lambda: survivor.meta.kv_get(f"{failover_module.REPLAYS_PREFIX}1") is None, 60,
               "the survivor finishes the failover of node 1's first incarnation")
    wait_until(lambda: not back.storage.holds.ids(), 60, "node 1 lets go of the records the failover committed")
    nodes.dies(back)  # the second incarnation dies before uploading: the survivor fails it over too
    wait_until(lambda: survivor.partition_info("t", 0)["owned"] and survivor.partition_info("u", 0)["owned"], 60,
               "the survivor serves both partitions")
    assert values(survivor, "t") == first, "the first incarnation's acknowledged records were lost"
    assert values(survivor, "u") == second, "the second incarnation's acknowledged records were lost"
