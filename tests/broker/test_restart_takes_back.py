"""A node restarted after a crash takes back the streams its previous incarnation left open in one metadata
transaction: no other node can open them in between. Before, the restart closed them first and opened them a
transaction later; the target of a move (whose watcher looks every few milliseconds while it waits for the source)
could open them in that gap at their committed end, without the records the crashed incarnation had acknowledged
and not uploaded (only in its WAL), and then wrote new records at those offsets: a read found other values at
offsets producers had been given (CI saw it in tests/cluster/test_move_shared_wal.py, the source restarted in
the middle of a move)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker.cluster.assignment import set_leaders
from broker.cluster.cluster import Cluster
from broker.errors import Fenced, InvalidRequest
from broker.metadata import MetadataClient
from broker.metadata.image import CLOSED, OPENED
from broker.node import BrokerNode
from broker.partitions.client_messages import InMessage


def _unreachable(*args: object, **kw: object) -> None:
    raise ConnectionError("the object store did not answer")


def test_a_restarted_node_takes_back_its_open_streams_with_no_gap_for_another_node(
        tmp_path: Path, meta_url_factory: Callable[[], str], monkeypatch: pytest.MonkeyPatch) -> None:
    meta_url, store = meta_url_factory(), f"file://{tmp_path}/objects"
    first = BrokerNode.open(tmp_path / "node1", store, meta_url, node_id=1, upload_interval_s=600)
    first.create_topic("t", 1)
    acked = [r.offset for r in first.produce("t", [InMessage(b"v%d" % i, key=b"k") for i in range(5)])]
    assert acked == [0, 1, 2, 3, 4]
    info = first.partition_info("t", 0)
    streams = (info["meta_stream"], info["data_stream"])
    topic_id = first.partitions.topic("t").topic_id
    monkeypatch.setattr(first.storage, "flush", _unreachable)  # the final upload fails: the streams stay open,
    first.close()  # the five records only in node 1's WAL, as after a kill -9

    other = MetadataClient(meta_url, 2)  # the target of a move of the partition, waiting for node 1 to close it
    other.register_node()
    set_leaders(other, {(topic_id, 0): 2})
    assert {other.get_stream(s).state for s in streams} == {OPENED}
    opened_by_other: list[dict[int, Any]] = []
    restarting = [False]
    real_txn = MetadataClient._txn

    def txn_then_other_looks(self: MetadataClient, build: Any) -> object:
        """After each metadata change of the restarting node 1: node 2 opens the streams if it finds them closed."""
        result = real_txn(self, build)
        if restarting[0] and self.node_id == 1:
            other.catch_up()
            if all(other.get_stream(s, refresh=False).state == CLOSED for s in streams):
                epoch = max(other.get_stream(s, refresh=False).epoch for s in streams) + 1
                answer = other.open_streams([(s, epoch) for s in streams])
                if all(v is None for v in answer.values()):
                    opened_by_other.append({s: other.get_stream(s, refresh=False).end_offset for s in streams})
                else:
                    assert all(isinstance(v, (Fenced, InvalidRequest)) for v in answer.values()), answer
        return result

    real_claim = Cluster.claim_at_open

    def claim_at_open(self: Cluster, every: list[Any]) -> None:
        restarting[0] = True
        try:
            real_claim(self, every)
        finally:
            restarting[0] = False

    monkeypatch.setattr(MetadataClient, "_txn", txn_then_other_looks)
    monkeypatch.setattr(Cluster, "claim_at_open", claim_at_open)
    again = BrokerNode.open(tmp_path / "node1", store, meta_url, node_id=1, upload_interval_s=600)
    try:
        assert opened_by_other == [], "node 2 opened the partition's streams while node 1 was taking them back"
        assert again.recovered_records == 5
        assert [m.value for m in again.fetch("t", 0, 0, 10)[0]] == [b"v%d" % i for i in range(5)]
        assert other.get_stream(streams[1]).end_offset == 5  # committed by node 1 before anyone else opens it
    finally:
        again.close()
        other.close()
