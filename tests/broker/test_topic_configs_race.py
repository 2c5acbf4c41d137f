"""Topic configs changed while the topic is deleted: the alteration refuses (the topic is not found) and leaves
nothing behind, so a topic created later under the name starts with the server defaults, not with a deleted
topic's retention. Two alterations at once both count."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from broker.node import BrokerNode
from broker.partitions import topic_config
from broker.partitions.topic_errors import TopicNotFound


@pytest.fixture
def node(local_node: BrokerNode) -> BrokerNode:
    return local_node


def between_read_and_write(monkeypatch: pytest.MonkeyPatch, step: Any) -> None:
    """Run `step` once, after an alteration read the topic's configs and before it writes them."""
    real = topic_config.merge
    ran: list[bool] = []

    def merge(*args: Any, **kw: Any) -> Any:
        out = real(*args, **kw)
        if not ran:
            ran.append(True)
            step()
        return out

    monkeypatch.setattr(topic_config, "merge", merge)


def test_configs_altered_while_the_topic_is_deleted_are_not_left_behind(node: BrokerNode,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    node.create_topic("orders", 1)
    between_read_and_write(monkeypatch, lambda: node.delete_topic("orders"))
    with pytest.raises(TopicNotFound):
        node.alter_topic_configs("orders", {"retention.ms": 60_000})
    monkeypatch.undo()
    node.create_topic("orders", 1)  # created again under the name
    assert node.partitions.registry.configs("orders") == {}
    assert node.describe_topic("orders")["configs"]["retention.ms"]["source"] == "default"


def test_two_alterations_at_once_both_count(node: BrokerNode, monkeypatch: pytest.MonkeyPatch) -> None:
    node.create_topic("orders", 1)
    other = threading.Thread(target=node.alter_topic_configs, args=("orders", {"retention.bytes": 1 << 30}))
    between_read_and_write(monkeypatch, lambda: (other.start(), other.join(30)))
    node.alter_topic_configs("orders", {"retention.ms": 60_000})
    assert not other.is_alive()
    assert node.partitions.registry.configs("orders") == {"retention.ms": 60_000, "retention.bytes": 1 << 30}


def test_a_config_of_a_later_version_is_ignored_here_and_kept_by_an_alteration(node: BrokerNode) -> None:
    """A rolling upgrade: a node of a later version stored a config this version does not know. Here the topic
    is described and served with the configs known here (no damage reported), and an alteration made here keeps
    the unknown config in the store for the later version."""
    import json

    node.create_topic("orders", 1)
    registry = node.partitions.registry
    key = topic_config.kv_key("orders")
    registry.meta.kv_put(key, json.dumps({"retention.ms": 60_000, "segment.future": {"any": "shape"}}))
    assert registry.configs("orders") == {"retention.ms": 60_000}
    assert registry.alter_configs("orders", {"retention.bytes": 1 << 20}) == {"retention.ms": 60_000,
                                                                           "retention.bytes": 1 << 20}
    assert json.loads(registry.meta.kv_get(key) or "{}") == {"retention.ms": 60_000, "retention.bytes": 1 << 20,
                                                             "segment.future": {"any": "shape"}}
    registry.meta.kv_put(key, json.dumps({"retention.ms": "soon"}))  # a known config's bad value is damage
    with pytest.raises(RuntimeError, match="is damaged"):
        registry.configs("orders")
