"""Adding partitions to a topic (Kafka's CreatePartitions) through confluent-kafka's AdminClient and over HTTP on
a real `mqindex serve`: the new partitions take records and give them back, the old ones keep theirs, a
consumer group reading the topic picks the new ones up, and a count that does not grow, a manual placement or an
unknown topic is refused with Kafka's code (HTTP: 400 / 404 naming the reason) and changes nothing."""

from __future__ import annotations

import time
import uuid
from contextlib import ExitStack

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from tests.kafka.conftest import KafkaServerProcess


def _partitions(admin: AdminClient, topic: str) -> int:
    return len(admin.list_topics(topic, timeout=10).topics[topic].partitions)


def _produce(bootstrap: str, topic: str, records: list[tuple[int, bytes]]) -> list[tuple[int, int]]:
    """(partition, offset) of each record, produced to the partition given."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "topic.metadata.refresh.interval.ms":
                  500})
    acks: list[tuple[int, int]] = []

    def done(err: KafkaError | None, msg: object) -> None:
        assert err is None, err
        acks.append((msg.partition(), msg.offset()))  # type: ignore[attr-defined]

    for partition, value in records:
        p.produce(topic, value, partition=partition, on_delivery=done)
    assert p.flush(30) == 0
    return acks


def test_partitions_added_through_the_admin_client_take_and_give_records(kafka_server: KafkaServerProcess,
                                                                           kafka_clients: ExitStack) -> None:
    admin = kafka_clients.enter_context(AdminClient({"bootstrap.servers": kafka_server.bootstrap}))
    admin.create_topics([NewTopic("grow", 2, 1)])["grow"].result(20)
    assert sorted(_produce(kafka_server.bootstrap, "grow", [(0, b"old-0"), (1, b"old-1")])) == [(0, 0), (1, 0)]

    admin.create_partitions([NewPartitions("grow", 5)])["grow"].result(30)
    assert _partitions(admin, "grow") == 5
    assert httpx.get(f"{kafka_server.url}/v1/topics/grow", timeout=10).json()["partitions"] == 5
    assert sorted(_produce(kafka_server.bootstrap, "grow", [(p, b"new-%d" % p) for p in range(5)])) == [
        (0, 1), (1, 1), (2, 0), (3, 0), (4, 0)]

    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": kafka_server.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe(["grow"])
        seen: dict[int, list[bytes]] = {}
        deadline = time.monotonic() + 60
        while sum(map(len, seen.values())) < 7:
            assert time.monotonic() < deadline, seen
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            seen.setdefault(msg.partition(), []).append(msg.value())
        assert seen == {0: [b"old-0", b"new-0"], 1: [b"old-1", b"new-1"], 2: [b"new-2"], 3: [b"new-3"],
                        4: [b"new-4"]}
    finally:
        consumer.close()


@pytest.mark.parametrize(("count", "code", "says"), [
    (3, KafkaError.INVALID_PARTITIONS, "has 3 partitions"),
    (2, KafkaError.INVALID_PARTITIONS, "can only grow"),
])
def test_a_count_that_does_not_grow_is_refused_and_changes_nothing(kafka_server: KafkaServerProcess,
                                                                   kafka_clients: ExitStack, count: int, code: int,
                                                                   says: str) -> None:
    admin = kafka_clients.enter_context(AdminClient({"bootstrap.servers": kafka_server.bootstrap}))
    admin.create_topics([NewTopic("fixed", 3, 1)])["fixed"].result(20)
    with pytest.raises(KafkaException) as refused:
        admin.create_partitions([NewPartitions("fixed", count)])["fixed"].result(20)
    assert refused.value.args[0].code() == code and says in refused.value.args[0].str()
    assert _partitions(admin, "fixed") == 3


def test_manual_placements_validate_only_and_unknown_topics(kafka_server: KafkaServerProcess,
                                                            kafka_clients: ExitStack) -> None:
    admin = kafka_clients.enter_context(AdminClient({"bootstrap.servers": kafka_server.bootstrap}))
    admin.create_topics([NewTopic("placed", 1, 1)])["placed"].result(20)
    with pytest.raises(KafkaException) as refused:
        admin.create_partitions([NewPartitions("placed", 2, replica_assignment=[[0]])])["placed"].result(20)
    assert refused.value.args[0].code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    admin.create_partitions([NewPartitions("placed", 4)], validate_only=True)["placed"].result(20)
    assert _partitions(admin, "placed") == 1  # validated, not done
    with pytest.raises(KafkaException) as unknown:
        admin.create_partitions([NewPartitions("nowhere", 4)])["nowhere"].result(20)
    assert unknown.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_partitions_added_over_http(kafka_server: KafkaServerProcess) -> None:
    base = kafka_server.url
    assert httpx.post(f"{base}/v1/topics", json={"name": "web", "partitions": 1}, timeout=30).status_code == 201
    r = httpx.post(f"{base}/v1/topics/web/partitions", json={"partitions": 3}, timeout=60)
    assert r.status_code == 200, r.text
    assert (r.json()["name"], r.json()["partitions"]) == ("web", 3)
    r = httpx.post(f"{base}/v1/topics/web/messages", json={"messages": [{"key": "k", "value": "v", "partition": 2}]},
                   timeout=30)
    assert r.status_code == 200 and r.json()["results"][0]["partition"] == 2, r.text
    r = httpx.get(f"{base}/v1/messages", params={"topic": "web", "key": "k"}, timeout=30)
    assert [m["partition"] for m in r.json()["messages"]] == [2], r.text

    refused = (({"partitions": 2}, "has 3 partitions"), ({"partitions": "4"}, "partitions"),
               ({"partitions": True}, "partitions"), ({"partitions": 4, "count": 5}, "count"),
               ({"partitions": 0}, "partitions"), ({}, "partitions"))
    for body, says in refused:
        r = httpx.post(f"{base}/v1/topics/web/partitions", json=body, timeout=30)
        assert r.status_code == 400 and says in r.text, (body, r.text)
    assert httpx.get(f"{base}/v1/topics/web", timeout=10).json()["partitions"] == 3
    r = httpx.post(f"{base}/v1/topics/nowhere/partitions", json={"partitions": 2}, timeout=30)
    assert r.status_code == 404, r.text
