"""A failover interrupted before the dead node's shared WAL is replayed (the WAL store did not answer once) leaves
the partition unserved, and the next look replays the WAL and serves it with every record the dead node
acknowledged. Before, the assignment watcher served the partition from its committed end at the next look, and
the acknowledged records were never replayed: new records took their offsets.

Two nodes in this process on one SQLite metadata database, a local object store and a shared WAL in an SQLite
blob store; node 1 stops renewing its lease (as a killed node does) with its records only in its WAL."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import broker.cluster.failover as failover_module
from broker.partitions.client_messages import InMessage
from storage_tier.errors import StorageUnavailable
from tests.cluster.conftest import InProcessNodes
from tests.cluster.harness import wait_until


@pytest.mark.parametrize("failures", [1, 3])
def test_an_interrupted_failover_replays_the_wal_before_serving(nodes: InProcessNodes, monkeypatch: pytest.MonkeyPatch,
                                                                failures: int) -> None:
    """failures: WAL reads that fail in a row. With more than one, a look comes while the failover is still pending:
    it must not begin another failover of the node (for its index claims), which took no partitions, read the WAL
    and deleted it, and left the first failover's partition unserved."""
    dead = nodes.open(1, shared_wal=True)
    dead.create_topic("t", 1)
    acked = dead.produce("t", [InMessage(b"m%02d" % i, key=b"k") for i in range(20)])
    assert [p.offset for p in acked] == list(range(20))
    nodes.dies(dead)  # its records only in its shared WAL
    real_read_wal = failover_module.read_wal
    failed: list[bool] = []

    def read_wal_once_unavailable(*args: Any, **kw: Any) -> Any:
        if len(failed) < failures:
            failed.append(True)
            raise StorageUnavailable("sqlite", None, "the WAL store did not answer")
        return real_read_wal(*args, **kw)

    monkeypatch.setattr(failover_module, "read_wal", read_wal_once_unavailable)
    survivor = nodes.open(0, shared_wal=True)
    deadline = time.monotonic() + 60
    while not survivor.partition_info("t", 0)["owned"]:
        assert time.monotonic() < deadline, "the survivor never served the dead node's partition"
        time.sleep(0.05)
    assert failed, "the failover's first WAL read was not interrupted"
    messages, _ = survivor.fetch("t", 0, 0, 100)
    assert [m.value for m in messages] == [b"m%02d" % i for i in range(20)], \
        "the partition was served without the dead node's acknowledged records"
    assert survivor.produce("t", [InMessage(b"after")])[0].offset == 20


def test_a_failover_that_keeps_failing_is_tried_again_less_and_less_often(
        nodes: InProcessNodes, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay that fails for good (here: until the test allows it) read the whole WAL again at every look, twice a
    second, and logged an error each time. Now each try waits twice as long as the one before (0.5 s, 1 s, 2 s, ...
    up to 30 s). The retries' clock is the test's: while it stands still, no try is made however long the looks go
    on; moved past each wait, the next try comes."""
    dead = nodes.open(1, shared_wal=True)
    dead.create_topic("t", 1)
    dead.produce("t", [InMessage(b"m%02d" % i, key=b"k") for i in range(5)])
    nodes.dies(dead)
    now = [1000.0]
    monkeypatch.setattr(failover_module, "retry_clock", lambda: now[0])
    real_read_wal = failover_module.read_wal
    reads: list[float] = []
    allowed = threading.Event()

    def read_wal_until_allowed(*args: Any, **kw: Any) -> Any:
        reads.append(now[0])
        if not allowed.is_set():
            raise StorageUnavailable("sqlite", None, "the WAL store did not answer")
        return real_read_wal(*args, **kw)

    monkeypatch.setattr(failover_module, "read_wal", read_wal_until_allowed)
    survivor = nodes.open(0, shared_wal=True)

    def tries_now(n: int) -> None:
        wait_until(lambda: len(reads) >= n, 30, f"try {n} comes")
        time.sleep(2.0)  # four looks of the watcher: none may try again before its wait is over
        assert len(reads) == n, f"tried again before the wait was over: {len(reads)} tries, {n} expected"

    tries_now(1)
    now[0] += 0.5  # the first wait
    tries_now(2)
    now[0] += 0.5  # half of the second (1 s): still waiting
    time.sleep(1.0)
    assert len(reads) == 2
    now[0] += 0.5
    tries_now(3)
    allowed.set()
    now[0] += 2.0  # the third wait
    wait_until(lambda: survivor.partition_info("t", 0)["owned"], 30, "the survivor serves the dead node's partition")
    assert len(reads) == 4
    assert [m.value for m in survivor.fetch("t", 0, 0, 100)[0]] == [b"m%02d" % i for i in range(5)]
