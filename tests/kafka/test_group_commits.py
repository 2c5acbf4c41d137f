"""OffsetCommit against the group's state, as Kafka's coordinator answers it, over raw requests to a real
`mqindex serve`: accepted from a current member while the group is stable and while it prepares a rebalance
(the commit a consumer makes before rejoining, or in its revocation callback), REBALANCE_IN_PROGRESS while
the group awaits its SyncGroup, UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION for a member or generation that is
not current, and a commit outside group management (generation -1, no member id) only into a group without
members. Then the same with kafka-python: a consumer's auto-commit before it rejoins is kept, so the member
that takes its partition over does not read the records again.
Also: a JoinGroup superseded by a newer one of the same member is answered, and a member removed while its
SyncGroup waits gets an answer."""

from __future__ import annotations

import select
import threading
import time
from collections.abc import Callable
from typing import Any

from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from api.kafka import errors
from tests.kafka.conftest import KafkaServerProcess
from tests.kafka.wire import FETCH_OFFSETS, Wire

T = "commits-topic"  # OffsetCommit does not need the topic to exist


def wait_heartbeat(w: Wire, group: str, generation: int, member: str, want: int, timeout: float = 20) -> None:
    """Heartbeat until the coordinator answers `want` (the group reached the state that answers it)."""
    deadline = time.monotonic() + timeout
    while (code := w.heartbeat(group, generation, member)) != want:
        assert time.monotonic() < deadline, f"heartbeat still answers {code}, not {want}, after {timeout} s"
        time.sleep(0.05)


def committed(w: Wire, group: str, partition: int = 0) -> int:
    resp = w.committed(group, T, [partition])
    assert resp.error_code == errors.NONE
    return int(resp.topics[0].partitions[0].committed_offset)


def test_offset_commit_follows_the_group_state(kafka_server: KafkaServerProcess) -> None:
    g = "g-commit-states"
    with Wire(kafka_server.kafka_port) as a, Wire(kafka_server.kafka_port) as b:
        # nobody in the group yet: a commit outside group management is stored; a generation it never had is not
        assert a.commit(g, -1, "", {(T, 0): 3}) == [errors.NONE]
        assert committed(a, g) == 3
        assert a.commit("g-never-joined", 4, "someone", {(T, 0): 1}) == [errors.ILLEGAL_GENERATION]

        ja = a.join(g)
        assert ja.error_code == errors.NONE and ja.leader == ja.member_id
        ma, gen = ja.member_id, ja.generation_id
        # joined, SyncGroup not sent yet (CompletingRebalance): REBALANCE_IN_PROGRESS
        assert a.commit(g, gen, ma, {(T, 0): 4}) == [errors.REBALANCE_IN_PROGRESS]
        assert committed(a, g) == 3
        assert a.sync(g, gen, ma, {ma: b"p0"}).error_code == errors.NONE
        assert a.commit(g, gen, ma, {(T, 0): 5}) == [errors.NONE]  # Stable

        b.send_join(g)  # a second member: the group prepares a rebalance, b's JoinGroup waits for a to rejoin
        wait_heartbeat(a, g, gen, ma, errors.REBALANCE_IN_PROGRESS)
        # PreparingRebalance: the current member's commit before it rejoins is stored
        assert a.commit(g, gen, ma, {(T, 0): 7}) == [errors.NONE]
        assert committed(a, g) == 7
        # not a current member, not the current generation, or a commit from outside the group
        assert a.commit(g, gen, "not-a-member", {(T, 0): 8}) == [errors.UNKNOWN_MEMBER_ID]
        assert a.commit(g, gen - 1, ma, {(T, 0): 8}) == [errors.ILLEGAL_GENERATION]
        assert a.commit(g, -1, ma, {(T, 0): 8}) == [errors.ILLEGAL_GENERATION]
        assert a.commit(g, -1, "", {(T, 0): 8}) == [errors.UNKNOWN_MEMBER_ID]
        assert committed(a, g) == 7

        ja2 = a.join(g, ma)  # both members have joined: the next generation
        jb = b.recv()
        assert ja2.error_code == jb.error_code == errors.NONE and ja2.generation_id == jb.generation_id == gen + 1
        assert a.commit(g, gen, ma, {(T, 0): 9}) == [errors.ILLEGAL_GENERATION]  # the old generation
        assert b.commit(g, gen + 1, jb.member_id, {(T, 0): 9}) == [errors.REBALANCE_IN_PROGRESS]

        for w, m in ((a, ma), (b, jb.member_id)):
            assert w.leave(g, m).members[0].error_code == errors.NONE
        # the group is empty again: a commit outside group management is stored
        assert a.commit(g, -1, "", {(T, 0): 10}) == [errors.NONE]
        assert committed(a, g) == 10


def test_offset_fetch_of_every_topic_lists_only_the_groups_own(kafka_server: KafkaServerProcess) -> None:
    """OffsetFetch with no topics (every committed one) for group `team`: not the offsets of group `team/eu`."""
    with Wire(kafka_server.kafka_port) as w:
        assert w.commit("team", -1, "", {(T, 0): 4}) == [errors.NONE]
        assert w.commit("team/eu", -1, "", {(T, 1): 8, ("other-topic", 0): 9}) == [errors.NONE] * 2
        for group, want in (("team", {(T, 0, 4)}), ("team/eu", {(T, 1, 8), ("other-topic", 0, 9)})):
            resp = w.call(FETCH_OFFSETS, group_id=group, topics=None)
            assert resp.error_code == errors.NONE
            assert {(t.name, p.partition_index, p.committed_offset) for t in resp.topics for p in t.partitions} == want


def test_a_commit_for_a_name_no_topic_can_have_is_refused_and_stores_nothing(kafka_server: KafkaServerProcess) -> None:
    """OffsetCommit of group `team` for topic `eu/t` (a name with '/', which no topic can have) is refused with
    INVALID_TOPIC_EXCEPTION and stores nothing: stored, it would read as group `team/eu`'s offset of topic `t`.
    The request's valid topics are committed."""
    with Wire(kafka_server.kafka_port) as w:
        assert w.commit("team", -1, "", {("eu/t", 0): 7, (T, 0): 3}) == [errors.INVALID_TOPIC_EXCEPTION, errors.NONE]
        for group, want in (("team", {(T, 0, 3)}), ("team/eu", set())):
            resp = w.call(FETCH_OFFSETS, group_id=group, topics=None)
            assert {(t.name, p.partition_index, p.committed_offset) for t in resp.topics for p in t.partitions} == want


def test_a_superseded_join_is_answered(kafka_server: KafkaServerProcess) -> None:
    g = "g-join-twice"
    port = kafka_server.kafka_port
    with Wire(port) as a, Wire(port) as a2, Wire(port) as b, Wire(port) as c:
        # a stable group of a (the leader) and c
        ja = a.join(g)
        ma = ja.member_id
        assert a.sync(g, ja.generation_id, ma, {ma: b"all"}).error_code == errors.NONE
        c.send_join(g)
        wait_heartbeat(a, g, ja.generation_id, ma, errors.REBALANCE_IN_PROGRESS)
        ja, jc = a.join(g, ma), c.recv()
        mc, gen = jc.member_id, ja.generation_id
        a.send_sync(g, gen, ma, {ma: b"0", mc: b"1"})
        c.send_sync(g, gen, mc)
        assert a.recv().error_code == c.recv().error_code == errors.NONE

        b.send_join(g)  # a third member: the group waits for a and c to rejoin
        wait_heartbeat(a, g, gen, ma, errors.REBALANCE_IN_PROGRESS)
        a.send_join(g, ma)  # a rejoins, and again from another connection (c has not rejoined: both wait)
        a2.send_join(g, ma)
        # (well within the rebalance timeout, 60 s, after which the group would go on without c)
        readable, _, _ = select.select([a.sock, a2.sock], [], [], 15)
        assert readable, "neither JoinGroup of a answered: the superseded one waits forever"
        superseded, newer = (a, a2) if a.sock in readable else (a2, a)
        first = superseded.recv()  # the one the server saw first, answered at once: join again
        assert first.error_code == errors.REBALANCE_IN_PROGRESS and first.member_id == ma
        c.send_join(g, mc)  # everyone has joined: the next generation, for the newer JoinGroup of a
        answers = {"a": newer.recv(), "b": b.recv(), "c": c.recv()}
        assert {n: r.error_code for n, r in answers.items()} == {"a": errors.NONE, "b": errors.NONE, "c": errors.NONE}
        assert {r.generation_id for r in answers.values()} == {gen + 1}
        assert answers["a"].member_id == ma and answers["a"].leader == ma and len(answers["a"].members) == 3


def test_a_member_removed_while_its_sync_waits_is_answered(kafka_server: KafkaServerProcess) -> None:
    g = "g-sync-removed"
    with Wire(kafka_server.kafka_port) as a, Wire(kafka_server.kafka_port) as b:
        ja = a.join(g)
        ma = ja.member_id
        assert a.sync(g, ja.generation_id, ma, {ma: b"all"}).error_code == errors.NONE
        b.send_join(g, session_timeout_ms=1000)  # b's session is short
        wait_heartbeat(a, g, ja.generation_id, ma, errors.REBALANCE_IN_PROGRESS)
        ja2 = a.join(g, ma)
        jb = b.recv()
        assert ja2.leader == ma and jb.error_code == errors.NONE
        # b waits for the leader's assignment; the leader takes longer than b's session: b is removed
        b.send_sync(g, jb.generation_id, jb.member_id)
        removed = b.recv()  # before, never answered
        assert removed.error_code == errors.UNKNOWN_MEMBER_ID and removed.assignment == b""
        # the leader learns of the rebalance b's removal started; the group goes on with a alone
        assert a.sync(g, ja2.generation_id, ma, {ma: b"x", jb.member_id: b"y"}).error_code \
            == errors.REBALANCE_IN_PROGRESS
        ja3 = a.join(g, ma)
        assert ja3.error_code == errors.NONE and [m.member_id for m in ja3.members] == [ma]


class Member(threading.Thread):
    """A kafka-python consumer of the group polled on a thread of its own (a consumer application's loop): the
    members rejoin while the others go on polling. (Polling two members in turn from one thread does not work
    with kafka-python 3.0.12: a JoinGroup it finishes between two polls is thrown away and sent again, so the
    group rebalances for ever.) Stopped, and its consumer closed without committing, by `stop`."""

    def __init__(self, topic: str, **opts: Any) -> None:
        super().__init__(daemon=True)
        self.topic, self.opts = topic, opts
        self.read: list[int] = []
        self.assigned: set[int] = set()
        self.error: BaseException | None = None
        self.halt = threading.Event()

    def run(self) -> None:
        c = KafkaConsumer(**self.opts)
        try:
            c.subscribe([self.topic])
            while not self.halt.is_set():
                for msgs in c.poll(timeout_ms=5000).values():
                    self.read += [int(m.value) for m in msgs]
                self.assigned = {tp.partition for tp in c.assignment()}
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc
        finally:
            c.close(autocommit=False)

    def stop(self) -> None:
        self.halt.set()
        self.join(60)
        assert not self.is_alive(), "the consumer's poll loop did not stop"
        assert self.error is None, self.error


def wait_until(what: str, cond: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"not true after {timeout} s: {what}"
        time.sleep(0.05)


def test_kafka_python_commit_before_rejoining_is_kept(kafka_server: KafkaServerProcess) -> None:
    """A consumer reads everything; a second one joins. The first commits its position before it rejoins
    (auto-commit in kafka-python's join preparation, with its current generation, while the group prepares the
    rebalance): the member that gets one of its partitions starts after what was read, nothing is read twice."""
    bootstrap, topic, group = kafka_server.bootstrap, "rejoin-commit", "g-rejoin-commit"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 2, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")

    def produce(first: int, n: int) -> None:
        for i in range(first, first + n):
            producer.send(topic, value=b"%d" % i, partition=i % 2)
        producer.flush(30)

    opts: dict[str, Any] = dict(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                enable_auto_commit=True, auto_commit_interval_ms=600_000,  # only the pre-rejoin one
                                session_timeout_ms=10_000, heartbeat_interval_ms=200)
    members: list[Member] = []
    try:
        produce(0, 20)
        first = Member(topic, **opts)
        members.append(first)
        first.start()
        wait_until("the first member read the 20 records", lambda: len(first.read) >= 20)
        assert sorted(first.read) == list(range(20))

        second = Member(topic, **opts)
        members.append(second)
        second.start()
        wait_until("a partition for each member", lambda: len(first.assigned) == len(second.assigned) == 1)
        before = len(first.read)
        produce(20, 10)  # new records: each member reads on from the offsets committed before the rebalance
        wait_until("the 10 new records read", lambda: len(first.read) - before + len(second.read) >= 10)
        assert sorted(first.read[before:] + second.read) == list(range(20, 30))  # nothing of 0..19 again
    finally:
        for m in members:
            m.stop()
        producer.close()
