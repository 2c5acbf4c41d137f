"""A hand-off whose close of the streams the metadata did not take (the database did not answer once) serves
the partition again on the source and is tried again, so the move completes. Before, the streams stayed closed
on the source but open in the metadata: every retry failed, and the target never served the partition.

Two nodes in this process on one SQLite metadata database and a local object store."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from broker.partitions.client_messages import InMessage
from tests.cluster.conftest import InProcessNodes


def test_a_handoff_whose_close_failed_once_completes(nodes: InProcessNodes, monkeypatch: pytest.MonkeyPatch) -> None:
    source = nodes.open(0, lease_ms=3000)
    source.create_topic("t", 1)
    source.produce("t", [InMessage(b"m%d" % i) for i in range(5)])
    target = nodes.open(1, lease_ms=3000)
    real_close = source.meta.close_streams
    refused: list[bool] = []

    def close_once_unanswered(*args: Any, **kw: Any) -> Any:
        if not refused:
            refused.append(True)
            raise sqlite3.OperationalError("database is locked")
        return real_close(*args, **kw)

    monkeypatch.setattr(source.meta, "close_streams", close_once_unanswered)
    moved = source.cluster.reassign("t", 0, 1, wait_s=60)
    assert refused and moved["to"] == 1
    assert target.partition_info("t", 0)["owned"]
    assert [m.value for m in target.fetch("t", 0, 0, 10)[0]] == [b"m%d" % i for i in range(5)]
    assert target.produce("t", [InMessage(b"after")])[0].offset == 5
