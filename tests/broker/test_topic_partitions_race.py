"""Partitions added to a topic while another caller changes it, through two metadata clients on one database (two
nodes): an add that loses the race reads the topic again and adds what is still missing; a deletion that loses
it to an add deletes the topic whole, the added partitions' streams included; never a deletion of a topic created
again under the name meanwhile."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.metadata import MetadataClient
from broker.partitions.topic_errors import TopicNotFound
from broker.partitions.topics import TopicRegistry


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[TopicRegistry, TopicRegistry]]:
    url = f"sqlite:///{tmp_path / 'meta.sqlite'}"
    a, b = MetadataClient(url, 0), MetadataClient(url, 1)
    a.register_node()
    b.register_node()
    try:
        yield TopicRegistry(a), TopicRegistry(b)
    finally:
        a.close()
        b.close()


def _before_first(monkeypatch: pytest.MonkeyPatch, obj: Any, name: str, first: Any) -> None:
    """`first()` runs once, just before the first call of obj.name."""
    real, done = getattr(obj, name), []

    def wrapped(*args: Any, **kw: Any) -> Any:
        if not done:
            done.append(1)
            first()
        return real(*args, **kw)

    monkeypatch.setattr(obj, name, wrapped)


def test_an_add_that_loses_the_race_adds_what_is_still_missing(two: tuple[TopicRegistry, TopicRegistry],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = two
    a.create("t", 2)
    _before_first(monkeypatch, a.meta, "kv_update_if", lambda: b.add_partitions("t", 4))
    before, after = a.add_partitions("t", 6)
    assert (before.partitions, after.partitions) == (4, 6)  # read again after the other add
    now = b.get("t")
    assert now is not None and now.partitions == 6 and now.streams == after.streams
    assert len({s.data_stream for s in now.streams}) == 6


def test_an_add_to_a_count_reached_meanwhile_is_refused(two: tuple[TopicRegistry, TopicRegistry],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = two
    a.create("t", 2)
    _before_first(monkeypatch, a.meta, "kv_update_if", lambda: b.add_partitions("t", 5))
    with pytest.raises(ValueError, match="has 5 partitions"):
        a.add_partitions("t", 4)
    got = b.get("t")
    assert got is not None and got.partitions == 5


def test_a_deletion_that_loses_the_race_to_an_add_deletes_the_topic_whole(
        two: tuple[TopicRegistry, TopicRegistry], monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = two
    a.create("t", 2)
    _before_first(monkeypatch, a.meta, "delete_streams", lambda: b.add_partitions("t", 3))
    deleted = a.delete("t")
    assert deleted.partitions == 3
    assert b.get("t") is None
    b.meta.catch_up()
    assert not [sid for s in deleted.streams for sid in (s.meta_stream, s.data_stream) if sid in b.meta.image.streams]


def test_a_creation_with_configs_keeps_them_when_partitions_are_added_at_once(
        two: tuple[TopicRegistry, TopicRegistry], monkeypatch: pytest.MonkeyPatch) -> None:
    """Another node adds partitions the moment the topic exists (right after whichever write made it visible):
    the creation still succeeds with its configs, and the topic has both the configs and the added partitions."""
    a, b = two
    done: list[int] = []
    for name in ("kv_put_if_absent", "kv_update_if", "kv_set_if", "kv_put_many"):
        real = getattr(a.meta, name)

        def wrapped(*args: Any, _real: Any = real, **kw: Any) -> Any:
            out = _real(*args, **kw)
            if not done and b.meta.kv_get("topics/t") is not None:
                done.append(1)
                b.add_partitions("t", 4)
            return out

        monkeypatch.setattr(a.meta, name, wrapped)
    created = a.create("t", 2, {"retention.ms": 60_000})
    assert done and created.partitions == 2
    assert b.configs("t") == {"retention.ms": 60_000}
    now = b.get("t")
    assert now is not None and now.partitions == 4


def test_a_topic_created_again_meanwhile_is_not_deleted(two: tuple[TopicRegistry, TopicRegistry],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = two
    a.create("t", 1)

    def replaced() -> None:
        b.delete("t")
        b.create("t", 1)

    _before_first(monkeypatch, a.meta, "delete_streams", replaced)
    with pytest.raises(TopicNotFound):
        a.delete("t")
    again = b.get("t")
    assert again is not None and again.partitions == 1  # the new topic stays


def test_a_read_from_before_a_change_does_not_replace_what_the_node_learnt_since(tmp_path: Path) -> None:
    """A request that read the topic before partitions were added, or before it was deleted and created again,
    and learns it afterwards: the node keeps the newer count, and keeps serving the newer topic."""
    from broker.node import BrokerNode
    from broker.partitions.client_messages import InMessage

    node = BrokerNode.open(tmp_path / "node", f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/meta.sqlite",
                           upload_interval_s=3600)
    try:
        node.create_topic("t", 2)
        old_count = node.partitions.registry.get("t")
        node.add_partitions("t", 4)
        assert old_count is not None and node.partitions.add_topic(old_count) == []
        assert node.describe_topic("t")["partitions"] == 4
        assert node.produce("t", [InMessage(b"x", partition=3)])[0].offset == 0

        node.create_topic("u", 1)
        old_id = node.partitions.registry.get("u")
        node.delete_topic("u")
        node.create_topic("u", 1)
        assert old_id is not None and node.partitions.add_topic(old_id) == []
        cached = node.partitions.cached_topic("u")
        assert cached is not None and cached.topic_id > old_id.topic_id
        assert node.produce("u", [InMessage(b"y")])[0].offset == 0
    finally:
        node.close()
