"""The cluster fixtures: three `mqindex serve` nodes, stopped (kill) at the end whatever happens; broker nodes in
the test's process (`nodes`), closed at the end."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.node import BrokerNode
from storage_tier.seaweedfs_server import SeaweedFS
from tests.cluster.harness import Cluster


@pytest.fixture
def cluster(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> Iterator[Cluster]:
    c = Cluster(tmp_path, seaweedfs.store_url("mqindex", f"cluster-{uuid.uuid4().hex[:8]}"), pg_url())
    try:
        for i in range(3):
            c.start(i)
        yield c
    finally:
        c.stop_all()




class InProcessNodes:
    """Broker nodes in the test's process on one SQLite metadata database and a local object store (and, with
    `shared_wal`, a shared WAL in an SQLite blob store), so that a test can inject a fault at one call. Uploads and
    maintenance wait for the test. Every node opened is closed at the end of the test."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.store, self.meta = f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/meta.sqlite"
        self.opened: list[BrokerNode] = []

    def open(self, node_id: int, lease_ms: int = 1000, shared_wal: bool = False, dir_name: str | None = None
             ) -> BrokerNode:
        """`dir_name`: the node's data directory under the test's (default node<id>); another one starts the node
        again while its dead incarnation's object is still open, as a restart on another machine does with a shared
        WAL."""
        n = BrokerNode.open(self.tmp_path / (dir_name or f"node{node_id}"), self.store, self.meta, node_id=node_id,
                            lease_ms=lease_ms, upload_interval_s=3600, maintenance_interval_s=3600,
                            wal_url=f"sqlite:///{self.tmp_path}/wal.sqlite" if shared_wal else None)
        self.opened.append(n)
        return n

    @staticmethod
    def dies(node: BrokerNode) -> None:
        """The node stops as a killed one does for the others: no more lease renewals, no more reconciling."""
        node.cluster.stop_watching()
        node.cluster.membership._beat.stop()

    def close(self) -> None:
        for n in reversed(self.opened):
            n.close()


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[InProcessNodes]:
    made = InProcessNodes(tmp_path)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def closing() -> Iterator[list[Any]]:
    """Objects the test opens (services, clients), closed at the end in reverse order whatever happens."""
    opened: list[Any] = []
    yield opened
    for obj in reversed(opened):
        obj.close()
