"""A transaction survives its coordinator's restart: the node (coordinator and partition leader) stopped with
SIGTERM or killed with SIGKILL in the middle of an open transaction comes back with the transaction's state
from the metadata; the producer then commits it, or, left alone, it is aborted by its timeout. Either way a
read_committed consumer never sees half of it."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.api.server import wait_for
from tests.kafka.conftest import KafkaServerProcess
from tests.kafka.test_transactions import TOPICS, lookup, make_topics, read_all
from tests.kafka.wire import Wire


def latest(s: KafkaServerProcess, topic: str, partition: int, isolation: int) -> int:
    with Wire(s.kafka_port) as w:
        resp = w.call((2, 7), replica_id=-1, isolation_level=isolation, topics=[
            dict(name=topic, partitions=[dict(partition_index=partition, current_leader_epoch=-1, timestamp=-1)])])
        return int(resp.topics[0].partitions[0].offset)


def open_transaction(s: KafkaServerProcess, tid: str, **extra: object) -> Producer:
    make_topics(s, TOPICS)
    p = Producer({"bootstrap.servers": s.bootstrap, "transactional.id": tid, **extra})
    p.init_transactions(30)
    p.begin_transaction()
    for part, topic in ((0, "tx-a"), (1, "tx-a"), (0, "tx-b")):
        for i in range(3):
            p.produce(topic, key=f"{tid}-{topic}-{part}-{i}".encode(), value=b"v", partition=part)
    assert p.flush(30) == 0
    return p


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_the_producer_commits_after_the_coordinator_restarts(tmp_path: Path, sig: int) -> None:
    s = KafkaServerProcess(tmp_path / "node").start()
    try:
        p = open_transaction(s, "tx-restart")
        s.restart(sig)
        assert latest(s, "tx-b", 0, 1) == 0  # still open after the restart: nothing of it is stable
        assert lookup(s, "tx-b", "tx-restart-tx-b-0-0") == []
        p.commit_transaction(60)
        got = read_all(s, ["tx-a", "tx-b"], "read_committed", 9)
        assert sorted(k for _, _, k, _ in got) == sorted(
            f"tx-restart-{t}-{q}-{i}".encode() for q, t in ((0, "tx-a"), (1, "tx-a"), (0, "tx-b")) for i in range(3))
        assert [m["key"] for m in lookup(s, "tx-b", "tx-restart-tx-b-0-0")] == ["tx-restart-tx-b-0-0"]
    finally:
        s.stop()


def test_a_transaction_left_open_across_a_kill_is_aborted_by_its_timeout(tmp_path: Path) -> None:
    s = KafkaServerProcess(tmp_path / "node").start()
    try:
        p = open_transaction(s, "tx-left", **{"transaction.timeout.ms": 4000})
        s.restart(signal.SIGKILL)
        del p  # the producer never comes back
        wait_for("the timed-out transaction's abort markers", lambda: all(
            latest(s, t, q, 1) == latest(s, t, q, 0) == 4 for q, t in ((0, "tx-a"), (1, "tx-a"), (0, "tx-b"))),
            timeout=60, interval=0.5)
        assert read_all(s, ["tx-a", "tx-b"], "read_committed", 0, timeout=5) == []
        assert lookup(s, "tx-a", "tx-left-tx-a-1-2") == []
    finally:
        s.stop()
