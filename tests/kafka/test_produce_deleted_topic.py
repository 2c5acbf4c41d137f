"""Acknowledged, then dropped, over Kafka: a topic deleted on another node of a 2-node cluster while its leader has
not seen the deletion yet (its watcher looks every 0.1 s). The leader's Kafka listener answers a produce only
after a metadata catch-up begun once the records were durable, so a real client (kafka-python) gets
UNKNOWN_TOPIC_OR_PARTITION for records the deletion drops, never an acknowledgement.

The nodes run in the test's process (tests/cluster/conftest.py) so that the leader's watcher can be held back
for the length of the produce; the Kafka listener is the real one, on a free port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaProducer
from kafka.errors import UnknownTopicOrPartitionError

from api.kafka import KafkaServer
from tests.cluster.conftest import InProcessNodes


@pytest.fixture
def in_process(tmp_path: Path) -> Iterator[InProcessNodes]:
    made = InProcessNodes(tmp_path)
    try:
        yield made
    finally:
        made.close()


def test_a_kafka_produce_to_a_topic_deleted_on_another_node_is_not_acknowledged(in_process: InProcessNodes) -> None:
    one = in_process.open(1)
    one.create_topic("gone", 1)  # led by node 1
    other = in_process.open(0)
    listener = KafkaServer(one, "127.0.0.1", 0)
    listener.start()
    producer = None
    try:
        producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{listener.port}", acks="all", retries=0,
                                 linger_ms=0, request_timeout_ms=10_000, max_block_ms=10_000)
        assert producer.send("gone", b"before", partition=0).get(10).offset == 0
        watcher = one.cluster.watcher
        assert watcher is not None
        with watcher.lock:  # node 1's next look has not come yet (up to 0.1 s after the deletion)
            other.delete_topic("gone")
            one.partitions.topic("gone")  # node 1 still serves the topic (no TopicNotFound)
            with pytest.raises(UnknownTopicOrPartitionError):
                producer.send("gone", b"after the deletion", partition=0).get(10)
        # a topic of the same name made again starts empty: nothing of the refused produce is in it
        other.create_topic("gone", 1)
    finally:
        if producer is not None:
            producer.close(5)
        listener.stop()
