"""The close of a group consumer with each client (confluent-kafka, aiokafka, kafka-python, kcat): the close
succeeds, the server logs no failed request, and the member is gone from the group at once: a newcomer joining
right after is alone in its generation (with the member still there it would wait for it to rejoin)."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from api.kafka import errors
from tests.kafka.conftest import KafkaServerProcess
from tests.kafka.wire import Wire

PARTITIONS, RECORDS = 4, 40
SESSION_MS = 30_000  # long: a member that did not leave would still be in the group during the check


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServerProcess]:
    s = KafkaServerProcess(tmp_path_factory.mktemp("close") / "node").start()
    try:
        yield s
    finally:
        s.stop()


def topic_with_records(s: KafkaServerProcess, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": s.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": s.bootstrap, "acks": "all"})
    for i in range(RECORDS):
        p.produce(topic, value=str(i).encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0


def assert_left(s: KafkaServerProcess, group: str) -> None:
    """The consumer left: a newcomer's JoinGroup is answered at once with itself as the only member, and the
    server logged no failed request."""
    with Wire(s.kafka_port, timeout=10) as w:
        joined = w.join(group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000)
        assert joined.error_code == errors.NONE, joined
        assert [m.member_id for m in joined.members] == [joined.member_id], "the closed consumer is still a member"
        assert w.leave(group, joined.member_id).members[0].error_code == errors.NONE
    log = s.log.read_text()
    assert "kafka request failed" not in log and "malformed request" not in log, log[-4000:]


def test_confluent_consumer_close(server: KafkaServerProcess) -> None:
    topic_with_records(server, "close-confluent")
    problems: list[Any] = []
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "g-confluent", "auto.offset.reset": "earliest",
                  "session.timeout.ms": SESSION_MS, "error_cb": problems.append})
    try:
        c.subscribe(["close-confluent"])
        got = 0
        deadline = time.monotonic() + 30
        while got < RECORDS and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got += 1
        assert got == RECORDS and len(c.assignment()) == PARTITIONS
    finally:
        c.close()
    assert [e for e in problems if e.code() != KafkaError._ALL_BROKERS_DOWN] == [], problems
    assert_left(server, "g-confluent")


def test_aiokafka_consumer_stop(server: KafkaServerProcess, caplog: pytest.LogCaptureFixture) -> None:
    topic_with_records(server, "close-aiokafka")

    async def run() -> int:
        c = AIOKafkaConsumer("close-aiokafka", bootstrap_servers=server.bootstrap, group_id="g-aiokafka",
                             auto_offset_reset="earliest", session_timeout_ms=SESSION_MS)
        await c.start()
        got = 0
        try:
            deadline = time.monotonic() + 30
            while got < RECORDS and time.monotonic() < deadline:
                got += sum(len(v) for v in (await c.getmany(timeout_ms=200)).values())
        finally:
            caplog.clear()  # what the stop logs
            with caplog.at_level(logging.INFO, logger="aiokafka.consumer.group_coordinator"):
                await c.stop()
        return got

    assert asyncio.run(run()) == RECORDS
    said = [r.getMessage() for r in caplog.records if "LeaveGroup" in r.getMessage()]
    assert said == ["LeaveGroup request succeeded"], said
    assert_left(server, "g-aiokafka")


def test_kafka_python_consumer_close(server: KafkaServerProcess, caplog: pytest.LogCaptureFixture) -> None:
    from kafka import KafkaConsumer

    topic_with_records(server, "close-kafka-python")
    c = KafkaConsumer("close-kafka-python", bootstrap_servers=server.bootstrap, group_id="g-kafka-python",
                      auto_offset_reset="earliest", session_timeout_ms=SESSION_MS, consumer_timeout_ms=30_000)
    try:
        got = 0
        for _ in c:
            got += 1
            if got == RECORDS:
                break
        assert got == RECORDS
    finally:
        caplog.clear()  # what the close logs
        with caplog.at_level(logging.INFO, logger="kafka.coordinator"):
            c.close()
    said = [r.getMessage() for r in caplog.records if "LeaveGroup" in r.getMessage()]
    assert said == ["LeaveGroup request for group g-kafka-python returned successfully"], said
    assert_left(server, "g-kafka-python")


def test_kcat_group_consumer_exits_cleanly(server: KafkaServerProcess) -> None:
    topic_with_records(server, "close-kcat")
    out = subprocess.run(["/usr/bin/kcat", "-b", server.bootstrap, "-G", "g-kcat", "-o", "beginning",
                          "-X", f"session.timeout.ms={SESSION_MS}", "-e", "close-kcat"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert sorted(int(v) for v in out.stdout.split()) == list(range(RECORDS))
    assert "ERROR" not in out.stderr and "failure" not in out.stderr, out.stderr
    assert_left(server, "g-kcat")
