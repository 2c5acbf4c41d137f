"""Topic deletion seen by a node that was down when it happened: two BrokerNodes on one metadata database.

Node 0 led and indexed a topic, then stopped; node 1 deleted the topic and created it again. When node 0
comes back and takes over the new topic's partition, its index still holds the old topic's checkpoint (an
offset beyond the new partition's end): it is reset, so the records node 0 appends at those offsets again
are found by key, and the old records never are."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.node import BrokerNode
from broker.partitions.client_messages import InMessage
from broker.partitions.kafka_clients import group_offsets
from broker.partitions.topic_errors import TopicNotFound
from storage_tier import open_store


def values(node: BrokerNode, topic: str, key: str) -> list[bytes]:
    node.sync_index()
    msgs, _ = node.find_by_key(topic, key, 0, None, 100, None)
    return sorted(m.value for m in msgs)


def test_a_node_down_at_the_deletion_resets_its_stale_index_checkpoint(tmp_path: Path) -> None:
    store, meta = f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/meta.sqlite"

    def open_node(node_id: int) -> BrokerNode:
        return BrokerNode.open(tmp_path / f"node{node_id}", store, meta, node_id=node_id, lease_ms=1000,
                               upload_interval_s=3600)

    n0 = open_node(0)
    try:
        n0.create_topic("t", 1)
        n0.produce("t", [InMessage(b"old-%d" % i, key=b"k") for i in range(10)])
        assert len(values(n0, "t", "k")) == 10
        assert n0.index.checkpoint("t", 0) == 9
    finally:
        n0.close()

    n1 = open_node(1)
    try:
        n1.delete_topic("t")
        n1.create_topic("t", 1)
        n1.produce("t", [InMessage(b"new-%d" % i, key=b"k") for i in range(3)])  # offsets 0..2
        assert values(n1, "t", "k") == [b"new-0", b"new-1", b"new-2"]
    finally:
        n1.close()

    n0 = open_node(0)
    try:
        assert n0.index.checkpoint("t", 0) == 9  # the deleted topic's, kept while node 0 was down
        n0.reassign("t", 0, 0)  # returns once node 0 serves the partition; it then resets the checkpoint
        assert n0.partition_info("t", 0)["owned"]
        deadline = time.monotonic() + 30
        while n0.index.checkpoint("t", 0) is not None:  # beyond the new partition's end (3)
            assert time.monotonic() < deadline, "the stale index checkpoint was not reset"
            time.sleep(0.01)
        produced = n0.produce("t", [InMessage(b"new-%d" % i, key=b"k") for i in range(3, 8)])
        assert [p.offset for p in produced] == [3, 4, 5, 6, 7]  # offsets the old topic's index had taken
        # node 0's own index: the records it appended, none of the old ones (offsets 0..2 are in node 1's
        # index, which this in-process node has no address to ask)
        assert values(n0, "t", "k") == [b"new-%d" % i for i in range(3, 8)]
    finally:
        n0.close()


def test_an_index_file_of_only_a_deleted_topic_expires_like_trimmed_data(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/objects"
    node = BrokerNode.open(tmp_path / "node", url, f"sqlite:///{tmp_path}/meta.sqlite", upload_interval_s=3600,
                           maintenance_interval_s=0, index_config={"maintain_interval_s": 0})
    store = open_store(url)
    try:
        files = {}
        for topic in ("gone", "stays"):
            node.create_topic(topic, 2)
            node.produce(topic, [InMessage(b"v%d" % i, key=b"k%d" % i) for i in range(20)])
            node.sync_index()
            files[topic] = next(f.name for f in node.index.files() if f.state.value == "WRITING")
            node.index.roll()  # the topic's entries alone in one file
        node.index.maintain()  # compacted and uploaded
        uploaded = {f.name: f.location for f in node.index.files() if f.state.value == "UPLOADED"}
        assert set(files.values()) <= set(uploaded)
        assert node.index.maintain().expired == []  # nothing trimmed, nothing deleted: every file kept

        node.delete_topic("gone")
        rep = node.index.maintain()
        assert rep.expired == [files["gone"]]
        assert not store.exists(uploaded[files["gone"]]) and store.exists(uploaded[files["stays"]])
        assert [m.value for m in node.find_by_key("stays", "k7", 0, None, 10, None)[0]] == [b"v7"]
    finally:
        store.close()
        node.close()


@given(group=st.text(min_size=1, max_size=30), topic=st.from_regex(r"[a-zA-Z0-9._-]{1,20}", fullmatch=True),
       other=st.from_regex(r"[a-zA-Z0-9._-]{1,20}", fullmatch=True), partition=st.integers(0, 10_000))
def test_group_offset_keys_of_a_topic_whatever_the_group_id(group: str, topic: str, other: str,
                                                             partition: int) -> None:
    """A deletion drops exactly the topic's committed offsets, group ids with "/" included."""
    key = f"{group_offsets.PREFIX}{group}/{topic}/{partition}"
    assert group_offsets.is_topic_key(key, topic)
    assert group_offsets.is_topic_key(key, other) == (other == topic)
    assert not group_offsets.is_topic_key(f"topics/{topic}", topic)


def test_a_lookup_that_read_the_registry_before_the_deletion_does_not_bring_the_topic_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request (or a background task) reads the topic from the registry, the topic is deleted and this node
    forgets it, then the request learns what it read: before, the deleted topic was served again by this node
    (GET /v1/topics/NAME answered 200 after the deletion, seen on a cluster)."""
    node = BrokerNode.open(tmp_path / "node", f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/meta.sqlite",
                           upload_interval_s=3600)
    try:
        node.create_topic("t", 2)
        read_before = node.partitions.registry.get("t")
        assert read_before is not None
        node.delete_topic("t")
        monkeypatch.setattr(node.partitions.registry, "get", lambda name, refresh=True: read_before)
        with pytest.raises(TopicNotFound):
            node.describe_topic("t")
        assert node.partitions.cached_topic("t") is None
        assert not [p for p in node.partitions.all() if p.topic.name == "t"]
        monkeypatch.undo()
        with pytest.raises(TopicNotFound):
            node.describe_topic("t")
        node.create_topic("t", 1)  # the name again: a new topic, served
        assert node.describe_topic("t")["partitions"] == 1
        assert node.produce("t", [InMessage(b"new")])[0].offset == 0
    finally:
        node.close()
