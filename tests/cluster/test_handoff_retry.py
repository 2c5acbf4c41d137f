"""A hand-off whose close of the streams the metadata did not take (the database did not answer once) serves
the partition again on the source and is tried again, so the move completes. Before, the streams stayed closed
on the source but open in the metadata: every retry failed, and the target never served the partition.

Two nodes in this process on one SQLite metadata database and a local object store."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from broker.node import BrokerNode
from broker.partitions.client_messages import InMessage


def test_a_handoff_whose_close_failed_once_completes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, meta = f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/meta.sqlite"

    def open_node(node_id: int) -> BrokerNode:
        return BrokerNode.open(tmp_path / f"node{node_id}", store, meta, node_id=node_id, lease_ms=3000,
                               upload_interval_s=3600, maintenance_interval_s=3600)

    nodes: list[BrokerNode] = []
    try:
        source = open_node(0)
        nodes.append(source)
        source.create_topic("t", 1)
        source.produce("t", [InMessage(b"m%d" % i) for i in range(5)])
        target = open_node(1)
        nodes.append(target)
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
    finally:
        for n in reversed(nodes):
            n.close()
