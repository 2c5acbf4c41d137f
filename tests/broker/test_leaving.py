"""The announcement of a node stopping (broker/cluster/leaving.py) on a real SQLite metadata database: another
node sees it for that incarnation only, and an unanswered metadata database neither stops the stop nor hides
what was read before."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.cluster import leaving
from broker.errors import MetadataUnavailable
from broker.metadata import MetadataClient
from broker.metadata.leases import ALIVE, NodeLease


def lease(node: int, epoch: int) -> NodeLease:
    return NodeLease(node, epoch, None, None, 0, ALIVE, 0)


def test_an_announcement_counts_for_its_incarnation_only(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/meta.sqlite"
    a, b = MetadataClient(url, node_id=1), MetadataClient(url, node_id=2)
    try:
        alive = {1: lease(1, 4), 2: lease(2, 7), 3: lease(3, 2)}
        assert leaving.staying(b, alive) == {1, 2, 3}
        leaving.announce(a, 1, 4)
        assert leaving.staying(b, alive) == {2, 3}  # read by the other node
        assert leaving.staying(b, {**alive, 1: lease(1, 5)}) == {1, 2, 3}  # started again: a newer epoch
    finally:
        a.close()
        b.close()


def test_an_unanswered_database_neither_raises_nor_forgets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path}/meta.sqlite"
    a, b = MetadataClient(url, node_id=1), MetadataClient(url, node_id=2)
    try:
        leaving.announce(a, 1, 4)
        alive = {1: lease(1, 4), 2: lease(2, 7)}
        assert leaving.staying(b, alive) == {2}

        def down(*_a: object, **_k: object) -> None:
            raise MetadataUnavailable("the metadata database does not answer")

        monkeypatch.setattr(b, "catch_up", down)
        monkeypatch.setattr(b, "_txn", down)
        leaving.announce(b, 2, 7)  # logged, not raised: the stop goes on unannounced
        assert leaving.staying(b, alive) == {2}  # the announcements last read
    finally:
        a.close()
        b.close()
