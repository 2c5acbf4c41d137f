"""A node whose WAL failed for good (a write error that is not a full disk) acknowledges nothing and cannot hand
its partitions over; it stops renewing its lease, so another node fails it over and serves its partitions.
Before, it went on renewing the lease and its partitions refused writes until someone restarted it.

Two nodes in this process on one SQLite metadata database and a local object store; the fault is the failed
node's WAL writer's fdatasync answering EINVAL."""

from __future__ import annotations

import errno
import os
import threading
import time

import pytest

from broker.errors import WalError
from broker.partitions.client_messages import InMessage
from broker.streams import wal as wal_module
from tests.cluster.conftest import InProcessNodes


def test_a_node_whose_wal_failed_is_failed_over(nodes: InProcessNodes, monkeypatch: pytest.MonkeyPatch) -> None:
    failing = nodes.open(1)
    failing.create_topic("t", 1)
    failing.produce("t", [InMessage(b"m%d" % i) for i in range(5)])
    failing.flush()  # committed to objects: whoever serves the partition next has them
    survivor = nodes.open(0)
    writer: threading.Thread = failing.storage.wal._writer
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        if threading.current_thread() is writer:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        real(fd)

    monkeypatch.setattr(wal_module.os, "fdatasync", fdatasync)
    with pytest.raises(WalError):
        failing.produce("t", [InMessage(b"refused")])
    assert failing.storage.failed is not None
    deadline = time.monotonic() + 60
    while not survivor.partition_info("t", 0)["owned"]:
        assert time.monotonic() < deadline, "nobody took over the failed node's partition"
        time.sleep(0.05)
    assert [m.value for m in survivor.fetch("t", 0, 0, 10)[0]] == [b"m%d" % i for i in range(5)]
    assert survivor.produce("t", [InMessage(b"after")])[0].offset == 5
