"""A node that stops cleanly (every stream closed) marks its lease shut down. One that stops with streams still
open (its final upload failed) and a shared WAL leaves the lease to expire, so the other nodes fail it over and
replay its WAL; before, it marked the lease shut down and nobody ever took its partitions. With a local WAL only
the node itself can read what it acknowledged and did not upload: it still marks the lease shut down and its
partitions wait for its restart."""

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


def opened(tmp_path: Path, shared_wal: bool = True) -> tuple[BrokerNode, str]:
    s = Settings(data_dir=str(tmp_path / "data")).resolved()
    n = BrokerNode.open(s.data_dir, s.store, s.metadata, lease_ms=LEASE_MS,
                        wal_url=f"sqlite:///{tmp_path}/wal.sqlite" if shared_wal else None)
    n.create_topic("t", 1)
    n.produce("t", [InMessage(b"v", key=b"k")])
    return n, s.metadata


def test_a_clean_stop_shuts_the_lease_down(tmp_path: Path) -> None:
    node, metadata = opened(tmp_path)
    node.close()
    assert lease_state(metadata) == SHUT_DOWN


def unreachable(*args: object, **kw: object) -> None:
    raise StorageUnavailable("s3", None, "the object store did not answer")


def test_a_stop_with_streams_left_open_lets_the_lease_expire(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    node, metadata = opened(tmp_path)
    monkeypatch.setattr(node.storage, "flush", unreachable)  # the final upload fails: streams stay open
    node.close()
    deadline = time.monotonic() + 30
    while (state := lease_state(metadata)) != EXPIRED:
        assert state != SHUT_DOWN, "an unclean stop marked the lease shut down: no failover would take its partitions"
        assert time.monotonic() < deadline, f"the lease is still {state}"
        time.sleep(0.05)


def test_with_a_local_wal_an_unclean_stop_waits_for_the_restart(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    node, metadata = opened(tmp_path, shared_wal=False)
    monkeypatch.setattr(node.storage, "flush", unreachable)
    node.close()
    assert lease_state(metadata) == SHUT_DOWN
    s = Settings(data_dir=str(tmp_path / "data")).resolved()
    again = BrokerNode.open(s.data_dir, s.store, s.metadata, lease_ms=LEASE_MS)  # restarted on its local WAL
    try:
        assert [m.value for m in again.fetch("t", 0, 0, 10)[0]] == [b"v"]  # recovered from it
    finally:
        again.close()
