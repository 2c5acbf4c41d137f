"""Fetch across partitions: read concurrently, answered within Kafka's limits, cut at batch boundaries."""

from __future__ import annotations

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from api.kafka.fetch import cut
from broker.partitions.records import ProducerRecord, build_batch, parse_batches
from tests.kafka.conftest import KafkaServerProcess
from tests.kafka.test_kafka_python import consume_all


def test_cut_keeps_whole_batches() -> None:
    batches = [build_batch([ProducerRecord(b"x" * n)], base_offset=i) for i, n in enumerate((100, 300, 50))]
    data = b"".join(batches)
    assert cut(data, len(data)) == data
    assert cut(data, len(data) - 1) == batches[0] + batches[1]
    assert cut(data, len(batches[0]) + len(batches[1])) == batches[0] + batches[1]
    assert cut(data, len(batches[0])) == batches[0]
    assert cut(data, len(batches[0]) - 1) == b""
    assert [b.header.base_offset for b in parse_batches(cut(data, len(data) - 1))] == [0, 1]


def test_small_fetch_limits_over_several_partitions_lose_nothing(kafka_server: KafkaServerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka_server.bootstrap)
    try:
        admin.create_topics([NewTopic("spread", 3, 1)])
    finally:
        admin.close()
    p = KafkaProducer(bootstrap_servers=kafka_server.bootstrap, acks="all", linger_ms=0, batch_size=4096)
    sent = set()
    for i in range(300):  # about 2 KiB a record: many batches in each of the 3 partitions
        md = p.send("spread", key=b"k%d" % i, value=bytes([i % 251]) * 2000, partition=i % 3)
        sent.add((i % 3, b"k%d" % i))
        if i % 50 == 49:
            p.flush()
    p.flush()
    md.get(timeout=30)
    p.close()
    # answers smaller than what the three partitions hold: each fetch is cut, the rest comes next time
    got = consume_all(kafka_server.bootstrap, "spread", 3, 300, fetch_max_bytes=16_000,
                      max_partition_fetch_bytes=8_000)
    assert {(m.partition, m.key) for m in got} == sent
    for part in range(3):
        offsets = [m.offset for m in got if m.partition == part]
        assert offsets == sorted(offsets) and len(offsets) == len(set(offsets)) == 100
