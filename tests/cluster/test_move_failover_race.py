"""A move's source dies before it hands the partition off; a survivor fails it over. Its fencing closes the source's
streams (and records the replay of its shared WAL) in one metadata transaction, and the survivor makes itself the
partition's leader in the next: the move's target, which was waiting for the streams to close, must not open them
in between. It would open them at their committed end, without what the source acknowledged and had not uploaded,
and the survivor, finding them open, would replay nothing into them and delete the WAL objects holding those
records (the acknowledged records lost; tests/cluster/test_move_shared_wal.py kills a source as the move begins).

Three nodes in this process on one SQLite metadata database and a shared WAL in an SQLite blob store; the
survivor's step between the two transactions is held until the target has looked at the partition twice."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from broker.cluster import failover, handoff
from broker.cluster.membership import LENT_WAL_RANGES
from broker.errors import NotLeader, NotOwner
from broker.partitions.client_messages import InMessage
from tests.cluster.conftest import InProcessNodes


def _until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        time.sleep(0.05)


def test_the_target_does_not_open_a_dead_sources_streams_before_the_failover_replays_them(
        nodes: InProcessNodes, monkeypatch: pytest.MonkeyPatch) -> None:
    survivor = nodes.open(0, shared_wal=True)
    source = nodes.open(1, shared_wal=True)
    target = nodes.open(2, shared_wal=True)
    survivor.create_topic("t", 3)
    p = next(i for i in range(3) if source.partition_info("t", i)["owned"])
    values = [b"v%03d-" % i + b"x" * 2000 for i in range(120)]
    for i in range(0, 120, 20):
        source.produce("t", [InMessage(v, partition=p) for v in values[i:i + 20]])
    topic_id = survivor.partitions.topic("t").topic_id

    fenced = threading.Event()  # the survivor fenced the source: between its two transactions
    looks_after: list[bool] = []  # the target's take-over attempts of `p` since then (what each returned)
    real_take_over, real_set_leaders = handoff.take_over, failover.set_leaders

    def take_over(parts: Any, q: Any, catch_up: Any) -> bool:
        seen_fence = fenced.is_set()  # (the look caught up before this call)
        out = real_take_over(parts, q, catch_up)
        if parts.node_id == 2 and q.topic.name == "t" and q.index == p and seen_fence:
            looks_after.append(out)
        return out

    def set_leaders(meta: Any, changes: dict[tuple[int, int], int]) -> Any:
        if (topic_id, p) in changes and not fenced.is_set():  # the failover's own, right after the fence
            fenced.set()
            _until(lambda: len(looks_after) >= 2 or target.partition_info("t", p)["owned"], 30,
                   "the target looked at the partition twice after the fence")
        return real_set_leaders(meta, changes)

    monkeypatch.setattr(handoff, "take_over", take_over)
    monkeypatch.setattr(failover, "set_leaders", set_leaders)

    nodes.dies(source)  # before it saw the move: its WAL alone holds the 120 records
    real_set_leaders(survivor.meta, {(topic_id, p): 2})  # the move begins
    _until(lambda: any(f["node"] == 1 for f in survivor.failovers()), 60, "the source failed over")
    assert fenced.is_set()
    assert not any(looks_after), "the target opened the streams the failover had not replayed yet"

    deadline = time.monotonic() + 60
    while True:  # read from whichever node serves it (the failover spreads its partitions: it may move on)
        assert time.monotonic() < deadline, "the partition not served within 60 s"
        got = None
        for n in (survivor, target):
            if n.partition_info("t", p)["owned"]:
                try:
                    got = [m.value for m in n.fetch("t", p, 0, 500)[0]]
                except NotOwner:
                    pass
        if got is not None:
            break
        time.sleep(0.05)
    assert got == values


def test_a_moves_target_answers_retry_not_an_empty_page_before_it_serves(
        nodes: InProcessNodes, monkeypatch: pytest.MonkeyPatch) -> None:
    """Between the source's hand-off and the target's take-over, the target is the partition's recorded leader but
    serves nothing yet: its committed end (all a node that does not lead a partition can read) is below what the
    source acknowledged. A read there is refused as "not served, retry" (HTTP 503), as the source refuses it naming
    the target (421): an empty page would tell a reader reading the partition through that it ends there."""
    source = nodes.open(0, shared_wal=True)
    target = nodes.open(1, shared_wal=True)
    source.create_topic("t", 2)
    p = next(i for i in range(2) if source.partition_info("t", i)["owned"])
    values = [b"v%03d" % i for i in range(50)]
    source.produce("t", [InMessage(v, partition=p) for v in values])
    topic_id = source.partitions.topic("t").topic_id
    # the source lends its WAL range only to a node it has seen announce that it reads one (at a lease renewal);
    # before that it uploads first, and the target would then rightly serve at once
    _until(lambda: source.cluster.membership.node_reads(1, LENT_WAL_RANGES), 30,
           "the source saw the target announce it reads lent WAL ranges")

    release = threading.Event()
    real_take_over = handoff.take_over

    def take_over(parts: Any, q: Any, catch_up: Any) -> bool:
        if parts.node_id == 1 and q.topic.name == "t" and q.index == p and not release.is_set():
            return False  # not yet: the window under test
        return real_take_over(parts, q, catch_up)

    monkeypatch.setattr(handoff, "take_over", take_over)
    try:
        failover.set_leaders(source.meta, {(topic_id, p): 1})
        _until(lambda: not source.partition_info("t", p)["owned"], 30, "the source handed the partition off")
        assert target.partition_info("t", p)["end_offset"] < len(values)  # lent, not uploaded
        for node, error in ((source, NotLeader), (target, NotOwner)):
            with pytest.raises(error):
                node.fetch("t", p, 0, 100)
    finally:
        release.set()
    _until(lambda: target.partition_info("t", p)["owned"], 30, "the target serves the partition")
    assert [m.value for m in target.fetch("t", p, 0, 100)[0]] == values
