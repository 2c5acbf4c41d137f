"""A restarting node holds the lease of its new incarnation before it reads its WAL: reading it may take longer
than a lease, and until the lease row moved to the new epoch a survivor saw the old incarnation's lease expired
and fenced the new one (with a local WAL, losing what the restart would have recovered)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker.metadata.leases import ALIVE, LeaseTable
from broker.node import BrokerNode
from broker.partitions.client_messages import InMessage
from broker.streams.storage import StreamStorage


def test_the_new_incarnation_holds_its_lease_while_its_wal_is_read(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    store, meta = f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/meta.sqlite"
    first = BrokerNode.open(tmp_path / "node", store, meta, lease_ms=1000)
    first.create_topic("t", 1)
    first.produce("t", [InMessage(b"v")])
    first.close()
    seen: list[tuple[int, str, int | None]] = []
    real_open = StreamStorage.open.__func__  # type: ignore[attr-defined]

    def opening(cls: type[StreamStorage], *args: Any, **kw: Any) -> StreamStorage:
        meta_client = args[2]
        table = LeaseTable(meta)
        try:
            row = next(n for n in table.nodes() if n.node_id == 0)
        finally:
            table.close()
        seen.append((row.epoch, row.state, meta_client.node_epoch))
        return real_open(cls, *args, **kw)

    monkeypatch.setattr(StreamStorage, "open", classmethod(opening))
    again = BrokerNode.open(tmp_path / "node", store, meta, lease_ms=1000)
    try:
        ((lease_epoch, state, node_epoch),) = seen
        assert node_epoch is not None and lease_epoch == node_epoch and state == ALIVE
    finally:
        again.close()
