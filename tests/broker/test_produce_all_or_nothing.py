"""An HTTP produce request spanning partitions is stored whole or not at all: a partition that stops being
served here between the request's first ownership check and the queueing of its batches (a hand-off to
another node, a fence, a topic deletion) refuses the whole request before any partition's batch is queued, so
a client that gets the error and retries (maybe on the new leader) stores no message twice."""

from __future__ import annotations

import time

import pytest

from broker.errors import NotOwner
from broker.node import BrokerNode
from broker.partitions.client_messages import InMessage


@pytest.fixture
def node(local_node: BrokerNode) -> BrokerNode:
    local_node.create_topic("t", 2)
    return local_node


def test_a_partition_handed_off_mid_request_refuses_the_whole_request(node: BrokerNode,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    parts = node.partitions
    moving = parts.get("t", 1)
    wait = parts.storage.wait_for_cache_room

    def hand_off_starts(*args: object, **kw: object) -> None:
        wait(*args, **kw)  # type: ignore[arg-type]
        with moving.lock:  # what a hand-off does first: the partition stops taking appends
            moving.owned, moving.why_not_owned = False, "moving to node 1"

    monkeypatch.setattr(parts.storage, "wait_for_cache_room", hand_off_starts)
    messages = [InMessage(b"to-0", partition=0), InMessage(b"to-1", partition=1), InMessage(b"to-0 again", partition=0)]
    with pytest.raises(NotOwner, match="moving to node 1"):
        node.produce("t", messages)
    monkeypatch.undo()
    data = parts.get("t", 0).data
    assert data is not None
    deadline = time.monotonic() + 30
    while data.confirmed_end < data.next_offset:  # anything queued is durable (and readable) before the check
        assert time.monotonic() < deadline, "queued appends not durable after 30 s"
        time.sleep(0.005)
    assert node.fetch("t", 0, 0, 10)[0] == [], "a partition of the refused request was stored"
    with moving.lock:  # the hand-off failed: served here again
        moving.owned, moving.why_not_owned = True, ""
    produced = node.produce("t", messages)  # the client's retry
    assert [(p.partition, p.offset) for p in produced] == [(0, 0), (1, 0), (0, 1)]
    assert [m.value for m in node.fetch("t", 0, 0, 10)[0]] == [b"to-0", b"to-0 again"]
    assert [m.value for m in node.fetch("t", 1, 0, 10)[0]] == [b"to-1"]
