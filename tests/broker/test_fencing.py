"""Two brokers on one PostgreSQL metadata with SeaweedFS as the object store: a stale epoch is fenced and
cannot commit; a node whose incarnation was replaced stops acknowledging instead of committing."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.errors import Fenced, NotOwner
from broker.metadata import MetadataClient
from broker.node import BrokerNode
from broker.objects.format import StreamRecord
from broker.partitions.client_messages import InMessage
from broker.partitions.records import ProducerRecord, build_batch
from broker.streams.uploader import upload_batch
from storage_tier import open_store


@pytest.fixture
def shared(seaweedfs, pg_url: Callable[[], str], tmp_path: Path) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {"store": seaweedfs.store_url("mqindex", f"fence-{uuid.uuid4().hex[:8]}"), "meta": pg_url(),
            "a": str(tmp_path / "a"), "b": str(tmp_path / "b")}


def _open(s: dict[str, str], which: str, node_id: int) -> BrokerNode:
    return BrokerNode.open(s[which], s["store"], s["meta"], node_id=node_id, upload_interval_s=60.0)


def test_stale_epoch_is_fenced_and_cannot_commit(shared: dict[str, str]) -> None:
    a = _open(shared, "a", 0)
    a.create_topic("f", 1)
    a.produce("f", [InMessage(b"first-%d" % i, key=b"k") for i in range(10)])
    sid = a.partition_info("f", 0)["data_stream"]
    a.close()  # streams CLOSED at epoch 0

    stale = MetadataClient(shared["meta"], 1, namespace="_kafka_mqindex")  # node 1 reads the image now
    stale.register_node()
    assert stale.get_stream(sid).epoch == 0 and stale.get_stream(sid).state == "CLOSED"

    a = _open(shared, "a", 0)  # node 0 takes the partition again: epoch 1
    assert a.partition_info("f", 0)["epoch"] == 1
    a.produce("f", [InMessage(b"second-%d" % i, key=b"k") for i in range(5)])

    # node 1 acts on its stale view: epoch 0 + 1 = 1 is node 0's now, epoch 0 is stale
    with pytest.raises(Fenced):
        stale.open_stream(sid, 1)
    with pytest.raises(Fenced):
        stale.open_stream(sid, 0)
    store = open_store(shared["store"])
    try:
        end_before = stale.get_stream(sid).end_offset
        payload = build_batch([ProducerRecord(b"intruder")], base_offset=end_before)
        with pytest.raises(Fenced):
            upload_batch({sid: [StreamRecord(sid, 1, end_before, 1, payload)]}, store, stale, ttl_ms=1)
        assert stale.get_stream(sid).end_offset == end_before  # nothing applied
        cleaned = stale.cleanup_objects(store)  # the intruder's prepared object expired: deleted
        assert len(cleaned.deleted) == 1 and not store.exists(stale.object_key(cleaned.deleted[0]))
    finally:
        store.close()
        stale.close()

    # node 1 as a broker: the partition is node 0's, so it refuses to produce but serves what is committed
    b = _open(shared, "b", 1)
    try:
        assert b.partition_info("f", 0)["owned"] is False
        with pytest.raises(NotOwner):
            b.produce("f", [InMessage(b"x")])
        a.flush()
        msgs, nxt = b.fetch("f", 0, 0, 100)
        assert [m.value for m in msgs] == [b"first-%d" % i for i in range(10)] + [b"second-%d" % i for i in range(5)]
        assert nxt == 15 and b.get_by_id(msgs[12].msg_id).value == b"second-2"  # type: ignore[union-attr]
    finally:
        b.close()
        a.close()

    # both nodes claim the CLOSED partition at once: exactly one owns it, the other is fenced or refused
    nodes: dict[int, BrokerNode] = {}

    def start(which: str, node_id: int) -> None:
        nodes[node_id] = _open(shared, which, node_id)

    threads = [threading.Thread(target=start, args=(w, i)) for i, w in ((0, "a"), (1, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        owners = [i for i, n in nodes.items() if n.partition_info("f", 0)["owned"]]
        assert len(owners) == 1
        winner, loser = nodes[owners[0]], nodes[1 - owners[0]]
        assert winner.produce("f", [InMessage(b"third")])[0].offset == 15
        with pytest.raises(NotOwner):
            loser.produce("f", [InMessage(b"nope")])
    finally:
        for n in nodes.values():
            n.close()


def test_replaced_incarnation_cannot_commit(shared: dict[str, str]) -> None:
    a = _open(shared, "a", 0)
    try:
        a.create_topic("g", 2)
        a.produce("g", [InMessage(b"committed", partition=0)])
        a.flush()
        a.produce("g", [InMessage(b"never-committed", partition=0)])
        newer = MetadataClient(shared["meta"], 0, namespace="_kafka_mqindex")
        newer.register_node()  # a new incarnation of node 0 fences this one's node epoch
        newer.close()
        a.flush()  # the commit is fenced: the node drops the partitions instead of committing
        for part in (0, 1):
            assert a.partition_info("g", part)["owned"] is False
            with pytest.raises(NotOwner):
                a.produce("g", [InMessage(b"after", partition=part)])
        check = MetadataClient(shared["meta"], 1, namespace="_kafka_mqindex")
        assert check.get_stream(a.partition_info("g", 0)["data_stream"]).end_offset == 1
        check.close()
    finally:
        a.close()
