"""A node that stops cleanly (every stream closed) marks its lease shut down; one that stops with streams still
open (its final upload failed) leaves the lease to expire, so the other nodes fail it over as after a crash.
Before, an unclean stop also marked the lease shut down, and nobody ever took its partitions."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from api.config import Settings
from broker.metadata.leases import EXPIRED, SHUT_DOWN, LeaseTable
from broker.node import BrokerNode
from broker.partitions.client_messages import InMessage
from storage_tier.errors import StorageUnavailable

LEASE_MS = 600


def lease_state(metadata: str, node_id: int = 0) -> str:
    table = LeaseTable(metadata)
    try:
        return next(n.state for n in table.nodes() if n.node_id == node_id)
    finally:
        table.close()


def opened(tmp_path: Path) -> tuple[BrokerNode, str]:
    s = Settings(data_dir=str(tmp_path / "data")).resolved()
    n = BrokerNode.open(s.data_dir, s.store, s.metadata, lease_ms=LEASE_MS)
    n.create_topic("t", 1)
    n.produce("t", [InMessage(b"v", key=b"k")])
    return n, s.metadata


def test_a_clean_stop_shuts_the_lease_down(tmp_path: Path) -> None:
    node, metadata = opened(tmp_path)
    node.close()
    assert lease_state(metadata) == SHUT_DOWN


def test_a_stop_with_streams_left_open_lets_the_lease_expire(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    node, metadata = opened(tmp_path)

    def unreachable(*args: object, **kw: object) -> None:
        raise StorageUnavailable("s3", None, "the object store did not answer")

    monkeypatch.setattr(node.storage, "flush", unreachable)  # the final upload fails: streams stay open
    node.close()
    deadline = time.monotonic() + 30
    while (state := lease_state(metadata)) != EXPIRED:
        assert state != SHUT_DOWN, "an unclean stop marked the lease shut down: no failover would take its partitions"
        assert time.monotonic() < deadline, f"the lease is still {state}"
        time.sleep(0.05)
