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
