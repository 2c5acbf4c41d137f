"""ListOffsets from confluent-kafka's AdminClient against `mqindex serve`: by timestamp, and MAX_TIMESTAMP
(KIP-734, ListOffsets v7: the offset of the record with the largest timestamp, the first of them on a tie, and
that timestamp; none in an empty partition), with earliest and latest beside them."""

from __future__ import annotations

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from tests.kafka.conftest import KafkaServerProcess
from tests.kafka.test_confluent import create

BASE = 1_700_000_000_000
# three batches (one flush each); the largest timestamp is inside the first batch, and again in the last one
BATCHES = [[BASE + 1000, BASE + 9000, BASE + 3000], [BASE + 2000, BASE + 4000], [BASE + 8000, BASE + 9000]]


def test_list_offsets_by_time_and_max_timestamp(kafka_server: KafkaServerProcess) -> None:
    bootstrap, topic = kafka_server.bootstrap, "list-offsets"
    create(bootstrap, topic, 2)  # partition 1 stays empty
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for batch in BATCHES:
        for t in batch:
            p.produce(topic, value=b"v", partition=0, timestamp=t)
        assert p.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def ask(spec: OffsetSpec, partition: int = 0) -> tuple[int, int]:
        tp = TopicPartition(topic, partition)
        info = admin.list_offsets({tp: spec}, request_timeout=30)[tp].result(30)
        return info.offset, info.timestamp

    assert ask(OffsetSpec.max_timestamp()) == (1, BASE + 9000)
    assert ask(OffsetSpec.for_timestamp(BASE + 3500)) == (1, BASE + 9000)
    assert ask(OffsetSpec.for_timestamp(BASE + 8500)) == (1, BASE + 9000)
    assert ask(OffsetSpec.for_timestamp(BASE + 9001))[0] == -1
    assert ask(OffsetSpec.earliest())[0] == 0 and ask(OffsetSpec.latest())[0] == 7
    assert ask(OffsetSpec.max_timestamp(), partition=1) == (-1, -1)
