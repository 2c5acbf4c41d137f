"""OffsetFetch with require_stable (v7+) while a transaction holds offsets of the group, against a real
`mqindex serve` and a real confluent-kafka transactional producer: UNSTABLE_OFFSET_COMMIT for the partitions whose
offsets a transaction has not completed yet (open, or decided and not moved yet), the committed offsets once it
commits, and the old ones again once one aborts; a read_committed consumer (which asks require_stable) gets the
transaction's offsets only after the commit."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from api.kafka import errors
from tests.kafka.conftest import KafkaServerProcess
from tests.kafka.test_transactions import make_topics
from tests.kafka.wire import COMMIT, Wire

FETCH_OFFSETS_V7 = (9, 7)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServerProcess]:
    s = KafkaServerProcess(tmp_path_factory.mktemp("txn-offsets") / "node").start()
    try:
        make_topics(s, {"st-in": 2, "st-out": 1})
        yield s
    finally:
        s.stop()


def fetch(s: KafkaServerProcess, group: str, stable: bool) -> dict[int, tuple[int, int]]:
    """partition of st-in -> (error code, committed offset), by a raw OffsetFetch v7."""
    with Wire(s.kafka_port) as w:
        r = w.call(FETCH_OFFSETS_V7, group_id=group, topics=[dict(name="st-in", partition_indexes=[0, 1])],
                   require_stable=stable)
    assert r.error_code == errors.NONE, r
    return {p.partition_index: (p.error_code, p.committed_offset) for t in r.topics for p in t.partitions}


def commit_plain(s: KafkaServerProcess, group: str, offsets: dict[int, int]) -> None:
    with Wire(s.kafka_port) as w:
        r = w.call(COMMIT, group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                   topics=[dict(name="st-in", partitions=[dict(partition_index=i, committed_offset=o,
                                                                committed_metadata="") for i, o in offsets.items()])])
    assert all(p.error_code == errors.NONE for t in r.topics for p in t.partitions), r


def wait_for(what: str, check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.05)


def open_transaction(s: KafkaServerProcess, tid: str, group: str, offsets: dict[int, int]) -> Producer:
    """A transactional producer with one record produced and the group's offsets sent, not ended."""
    p = Producer({"bootstrap.servers": s.bootstrap, "transactional.id": tid})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("st-out", b"v", key=tid.encode())
    meta = Consumer({"bootstrap.servers": s.bootstrap, "group.id": group})
    try:
        p.send_offsets_to_transaction([TopicPartition("st-in", i, o) for i, o in offsets.items()],
                                      meta.consumer_group_metadata(), 30)
    finally:
        meta.close()
    return p


def test_offsets_of_an_open_transaction_are_unstable_until_it_commits(server: KafkaServerProcess) -> None:
    group = "stable-commit"
    commit_plain(server, group, {0: 1, 1: 1})
    p = open_transaction(server, "stable-commit-tx", group, {0: 5})
    # partition 0 has offsets in the open transaction, partition 1 none
    assert fetch(server, group, stable=True) == {0: (errors.UNSTABLE_OFFSET_COMMIT, -1), 1: (errors.NONE, 1)}
    assert fetch(server, group, stable=False) == {0: (errors.NONE, 1), 1: (errors.NONE, 1)}
    p.commit_transaction(30)
    # the completion moves the offsets after EndTxn is answered: unstable until then, never the old offset
    seen = wait_for("the transaction's offsets committed",
                    lambda: (f := fetch(server, group, stable=True))[0] != (errors.UNSTABLE_OFFSET_COMMIT, -1) and f)
    assert seen == {0: (errors.NONE, 5), 1: (errors.NONE, 1)}


def test_offsets_of_an_aborted_transaction_leave_the_old_ones(server: KafkaServerProcess) -> None:
    group = "stable-abort"
    commit_plain(server, group, {0: 2})
    p = open_transaction(server, "stable-abort-tx", group, {0: 9, 1: 9})
    assert fetch(server, group, stable=True) == {0: (errors.UNSTABLE_OFFSET_COMMIT, -1),
                                                 1: (errors.UNSTABLE_OFFSET_COMMIT, -1)}
    p.abort_transaction(30)
    seen = wait_for("the aborted transaction's offsets dropped",
                    lambda: (f := fetch(server, group, stable=True))[0][0] == errors.NONE and f)
    assert seen == {0: (errors.NONE, 2), 1: (errors.NONE, -1)}


def test_a_read_committed_consumer_gets_the_offsets_once_the_transaction_commits(
        server: KafkaServerProcess) -> None:
    group = "stable-consumer"
    commit_plain(server, group, {0: 3})
    committed = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group,
                          "isolation.level": "read_committed", "enable.auto.commit": False})
    uncommitted = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group,
                            "isolation.level": "read_uncommitted", "enable.auto.commit": False})
    try:
        # both have found the group's coordinator and read the offset before the transaction
        assert committed.committed([TopicPartition("st-in", 0)], 20)[0].offset == 3
        p = open_transaction(server, "stable-consumer-tx", group, {0: 7})
        assert uncommitted.committed([TopicPartition("st-in", 0)], 10)[0].offset == 3
        with pytest.raises(KafkaException):  # asked with require_stable: retried until its timeout
            committed.committed([TopicPartition("st-in", 0)], 3)
        p.commit_transaction(30)
        assert committed.committed([TopicPartition("st-in", 0)], 20)[0].offset == 7
    finally:
        committed.close()
        uncommitted.close()
