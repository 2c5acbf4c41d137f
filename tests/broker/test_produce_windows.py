"""Acknowledged, then dropped: the windows in which a produce was acknowledged (or refused) while what it stored
said otherwise. An acknowledgement is a promise, and an HTTP produce over several partitions is stored whole or
refused whole.

(a) a topic deleted on another node: its leader learns of it at its watcher's next look (0.1 s), and until then
    acknowledged produces the deletion drops. Now it refuses them (topic not found) before answering.
(b) a fence of the node between a request's check and its appends: the first partition's batch was queued (and
    is in the WAL a survivor replays) while the second partition refused. Now the fence waits until the whole
    request is queued, and a request whose streams were fenced once queued is refused.
(c) the disk filling between a request's room check and its appends: the second partition's append was refused
    after the first's was queued. Now the request's room is reserved at once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.errors import NotOwner, OutOfDisk
from broker.node import BrokerNode
from broker.partitions.client_messages import InMessage
from broker.partitions.topic_errors import TopicNotFound
from broker.streams import disk_space
from broker.streams.stream import Stream
from tests.cluster.conftest import InProcessNodes

TWO = [InMessage(b"to-0", partition=0), InMessage(b"to-1", partition=1)]


@pytest.fixture
def node(local_node: BrokerNode) -> BrokerNode:
    local_node.create_topic("t", 2)
    return local_node


def streams(node: BrokerNode) -> list[Stream]:
    out = [node.partitions.get("t", i).data for i in range(2)]
    assert all(s is not None for s in out)
    return out  # type: ignore[return-value]


def queued(ss: list[Stream]) -> list[int]:
    """Offsets each stream queued on the WAL (what a restart or a survivor's replay would store)."""
    return [s.appended_offsets for s in ss]


@pytest.fixture
def in_process(tmp_path: Path) -> Iterator[InProcessNodes]:
    made = InProcessNodes(tmp_path)
    try:
        yield made
    finally:
        made.close()


def test_a_produce_after_the_topic_was_deleted_on_another_node_is_refused(in_process: InProcessNodes) -> None:
    one = in_process.open(1)
    one.create_topic("t", 1)  # led by node 1
    zero = in_process.open(0)
    assert one.produce("t", [InMessage(b"before")])[0].offset == 0
    watcher = one.cluster.watcher
    assert watcher is not None
    with watcher.lock:  # node 1's next look has not come yet (up to 0.1 s after the deletion)
        zero.delete_topic("t")
        with pytest.raises(TopicNotFound):
            one.produce("t", [InMessage(b"after the deletion")])


def test_a_fence_between_the_check_and_the_appends_stores_all_or_nothing(node: BrokerNode,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    ss = streams(node)
    append = ss[0].append
    fencer: list[threading.Thread] = []

    class FencedBeforeTheAnswer:
        """The first append's future, whose result comes once the fence is done: the fence lands before the
        request is answered, whichever thread the machine runs first once the request is queued (the fencer,
        waiting for the streams' append locks, or the produce, waiting for the WAL)."""

        def __init__(self, fut: Any) -> None:
            self.fut = fut

        def result(self, *args: Any, **kw: Any) -> Any:
            fencer[0].join(30)
            return self.fut.result(*args, **kw)

    def then_fenced(*args: Any, **kw: Any) -> Any:
        fut = append(*args, **kw)
        # the node is fenced now (a survivor took it over: every stream this node has open is lost)
        t = threading.Thread(target=node.storage.abandon, args=(ss,))
        t.start()
        t.join(0.5)  # done at once before; now it waits until the request is queued
        fencer.append(t)
        return FencedBeforeTheAnswer(fut)

    monkeypatch.setattr(ss[0], "append", then_fenced)
    with pytest.raises(NotOwner) as refused:
        node.produce("t", TWO)
    fencer[0].join(30)
    assert all(s.fenced for s in ss)
    assert queued(ss) in ([0, 0], [1, 1]), f"the refused request was queued in part: {queued(ss)}"
    # queued, then fenced: in the WAL a survivor replays, so the refusal says they may be kept
    written = "were written before it and are not acknowledged: they may or may not be kept"
    assert (written in str(refused.value)) == (queued(ss) == [1, 1]), (queued(ss), str(refused.value))


def test_the_disk_filling_between_the_room_check_and_the_appends(node: BrokerNode,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    ss = streams(node)
    floor = node.storage.disk._paths["wal"][1]
    asked: list[int] = []
    producing = threading.get_ident()

    def fills(path: Path) -> int:
        """Room for the request at the produce's first two looks, then the disk is full (another writer filled
        it); the node's poll thread sees room."""
        if threading.get_ident() != producing:
            return floor + (1 << 20)
        asked.append(1)
        return floor + (1 << 20) if len(asked) <= 2 else floor - 1

    monkeypatch.setattr(disk_space, "free_bytes", fills)
    try:
        produced = node.produce("t", TWO)
    except OutOfDisk:
        assert queued(ss) == [0, 0], f"the refused request was queued in part: {queued(ss)}"
        return
    assert queued(ss) == [1, 1]
    assert [(p.partition, p.offset) for p in produced] == [(0, 0), (1, 0)]
    monkeypatch.undo()
    assert [m.value for m in node.fetch("t", 0, 0, 10)[0]] == [b"to-0"]
    assert [m.value for m in node.fetch("t", 1, 0, 10)[0]] == [b"to-1"]
