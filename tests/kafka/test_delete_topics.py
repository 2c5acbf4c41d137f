"""DeleteTopics from Kafka clients against `mqindex serve`: confluent-kafka's AdminClient deletes a topic (and
gets UNKNOWN_TOPIC_OR_PARTITION for one that does not exist), `kcat -L` stops listing it, the group offsets
committed on it are gone, and a topic created again under the name is read from offset 0 with only its new
records."""

from __future__ import annotations

import subprocess
import time
from contextlib import ExitStack

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka.conftest import KafkaServerProcess


def kcat_topics(bootstrap: str) -> str:
    out = subprocess.run(["kcat", "-b", bootstrap, "-L"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for v in values:
        p.produce(topic, key=b"k", value=v, partition=0)
    assert p.flush(30) == 0


def read_all(c: Consumer, expected: int, timeout: float = 30) -> list[bytes]:
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(out) < expected and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            out.append(m.value())
    return out


def test_admin_client_delete_topics_kcat_and_group_offsets(kafka_server: KafkaServerProcess,
                                                           kafka_clients: ExitStack) -> None:
    bootstrap = kafka_server.bootstrap
    admin = kafka_clients.enter_context(AdminClient({"bootstrap.servers": bootstrap}))
    admin.create_topics([NewTopic("doomed", 1, 1), NewTopic("stays", 1, 1)])["doomed"].result(30)
    produce(bootstrap, "doomed", [b"old-%d" % i for i in range(10)])

    group = {"bootstrap.servers": bootstrap, "group.id": "g-doomed", "enable.auto.commit": False}
    c = Consumer(group)
    try:
        c.assign([TopicPartition("doomed", 0, 0)])
        assert len(read_all(c, 10)) == 10
        c.commit(offsets=[TopicPartition("doomed", 0, 10)], asynchronous=False)
        assert c.committed([TopicPartition("doomed", 0)], timeout=10)[0].offset == 10
    finally:
        c.close()
    assert "topic \"doomed\"" in kcat_topics(bootstrap)

    admin.delete_topics(["doomed"], operation_timeout=30)["doomed"].result(30)
    listing = kcat_topics(bootstrap)
    assert "topic \"doomed\"" not in listing and "topic \"stays\"" in listing

    # a topic that does not exist (any more): UNKNOWN_TOPIC_OR_PARTITION, the other topic is untouched
    with pytest.raises(KafkaException) as err:
        admin.delete_topics(["doomed"], operation_timeout=30)["doomed"].result(30)
    assert err.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert "topic \"stays\"" in kcat_topics(bootstrap)

    # created again under the name: the group's old offset is gone and offset 0 holds the first new record
    admin.create_topics([NewTopic("doomed", 1, 1)])["doomed"].result(30)
    produce(bootstrap, "doomed", [b"new-%d" % i for i in range(3)])
    c = Consumer({**group, "auto.offset.reset": "earliest"})
    try:
        assert c.committed([TopicPartition("doomed", 0)], timeout=10)[0].offset < 0  # nothing committed
        c.assign([TopicPartition("doomed", 0, 0)])
        assert read_all(c, 3) == [b"new-0", b"new-1", b"new-2"]
        assert c.poll(1.0) is None  # and nothing of the old records after them
    finally:
        c.close()
