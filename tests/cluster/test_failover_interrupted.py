"""A failover interrupted before the dead node's shared WAL is replayed (the WAL store did not answer once) leaves
the partition unserved, and the next look replays the WAL and serves it with every record the dead node
acknowledged. Before, the assignment watcher served the partition from its committed end at the next look, and
the acknowledged records were never replayed: new records took their offsets.

Two nodes in this process on one SQLite metadata database, a local object store and a shared WAL in an SQLite
blob store; node 1 stops renewing its lease (as a killed node does) with its records only in its WAL."""

from __future__ import annotations

import time
from typing import Any

import pytest

import broker.cluster.failover as failover_module
from broker.partitions.client_messages import InMessage
from storage_tier.errors import StorageUnavailable
from tests.cluster.conftest import InProcessNodes


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
