"""Consumer groups through Kafka's admin APIs on a real `mqindex serve`: confluent-kafka's and kafka-python's
AdminClient list, describe (members, client ids, hosts, assignments), read the committed offsets of, and delete
groups; a group with members is not deleted; OffsetDelete removes the offsets of a topic nobody subscribes to."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition

from tests.kafka.conftest import KafkaServerProcess

TOPIC = "admin-groups"


def wait_for(what: str, check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.fixture
def server(kafka_server: KafkaServerProcess) -> Iterator[KafkaServerProcess]:
    admin = AdminClient({"bootstrap.servers": kafka_server.bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, 2, 1), NewTopic("other", 1, 1)]).values():
        f.result(30)
    p = KafkaProducer(bootstrap_servers=kafka_server.bootstrap, acks="all")
    for i in range(10):
        p.send(TOPIC, value=str(i).encode(), partition=i % 2)
    p.send("other", value=b"x", partition=0)
    p.flush(30)
    p.close()
    yield kafka_server


def consumer(server: KafkaServerProcess, group: str, client_id: str) -> Consumer:
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group, "client.id": client_id,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 6000,
                  "heartbeat.interval.ms": 300})
    c.subscribe([TOPIC])
    return c


def consume(c: Consumer, n: int) -> None:
    got = 0
    deadline = time.monotonic() + 30
    while got < n and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got += 1
    assert got == n
    c.commit(asynchronous=False)


def test_confluent_admin_lists_describes_and_deletes_groups(server: KafkaServerProcess,
                                                            kafka_clients: ExitStack) -> None:
    admin = kafka_clients.enter_context(AdminClient({"bootstrap.servers": server.bootstrap}))
    c = consumer(server, "watched", "client-a")
    try:
        consume(c, 4)
        wait_for("the consumer's assignment", lambda: len(c.assignment()) == 2)
        listed = admin.list_consumer_groups().result(30)
        states = {g.group_id: g.state for g in listed.valid}
        assert states["watched"] == ConsumerGroupState.STABLE
        d = admin.describe_consumer_groups(["watched"])["watched"].result(30)
        assert d.state == ConsumerGroupState.STABLE and d.partition_assignor == "range"
        assert d.coordinator.port == server.kafka_port
        [m] = d.members
        assert (m.client_id, m.host) == ("client-a", "/127.0.0.1")
        assert sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions) == [(TOPIC, 0), (TOPIC, 1)]
        offsets = admin.list_consumer_group_offsets(
            [_request("watched")])["watched"].result(30).topic_partitions
        assert sum(tp.offset for tp in offsets) == 4
        # a group with a member is not deleted
        refused = admin.delete_consumer_groups(["watched"])["watched"]
        with pytest.raises(Exception, match="NON_EMPTY_GROUP"):
            refused.result(30)
    finally:
        c.close()  # LeaveGroup: the group is empty, its offsets stay
    d = admin.describe_consumer_groups(["watched"])["watched"].result(30)
    assert (d.state, d.members) == (ConsumerGroupState.EMPTY, [])
    admin.delete_consumer_groups(["watched"])["watched"].result(30)
    assert "watched" not in {g.group_id for g in admin.list_consumer_groups().result(30).valid}
    with pytest.raises(Exception, match="GROUP_ID_NOT_FOUND"):
        admin.delete_consumer_groups(["watched"])["watched"].result(30)


def _request(group: str):  # type: ignore[no-untyped-def]
    from confluent_kafka import ConsumerGroupTopicPartitions

    return ConsumerGroupTopicPartitions(group)


def test_kafka_python_admin_describes_members_and_deletes(server: KafkaServerProcess) -> None:
    c = consumer(server, "kp-watched", "client-b")
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        consume(c, 3)
        wait_for("the consumer's assignment", lambda: len(c.assignment()) == 2)
        assert admin.list_groups() == [dict(group_id="kp-watched", protocol_type="consumer", group_state="Stable",
                                            group_type="classic")]
        d = admin.describe_groups(["kp-watched"])["kp-watched"]
        assert (d["group_state"], d["protocol_type"], d["protocol_data"], d["error"]) == (
            "Stable", "consumer", "range", None)
        [m] = d["members"]
        assert (m["client_id"], m["client_host"]) == ("client-b", "/127.0.0.1")
        assert m["member_metadata"]["topics"] == [TOPIC]
        assert m["member_assignment"]["assigned_partitions"] == [dict(topic=TOPIC, partitions=[0, 1])]
        offsets = admin.list_group_offsets("kp-watched")["kp-watched"]
        assert sum(o.offset for o in offsets.values()) == 3
        assert admin.delete_groups(["kp-watched"]) == {"kp-watched": "NonEmptyGroupError"}
    finally:
        c.close()
    assert admin.delete_groups(["kp-watched"]) == {"kp-watched": "OK"}
    assert admin.list_group_offsets("kp-watched") == {"kp-watched": {}}
    assert admin.delete_groups(["kp-watched"]) == {"kp-watched": "GroupIdNotFoundError"}
    admin.close()


def test_offset_delete_removes_the_offsets_of_an_unsubscribed_topic(server: KafkaServerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    c = consumer(server, "od", "client-c")
    try:
        consume(c, 10)
        c.commit(offsets=[TopicPartition("other", 0, 1)], asynchronous=False)
        deleted = admin.delete_group_offsets("od", [KafkaTopicPartition("other", 0)])
        assert {(tp.topic, tp.partition): e.__name__ for tp, e in deleted.items()} == {("other", 0): "NoError"}
        refused = admin.delete_group_offsets("od", [KafkaTopicPartition(TOPIC, 0)])
        assert {(tp.topic, tp.partition): e.__name__ for tp, e in refused.items()} == {
            (TOPIC, 0): "GroupSubscribedToTopicError"}
        left = admin.list_group_offsets("od")["od"]
        assert sorted((tp.topic, tp.partition, o.offset) for tp, o in left.items()) == [(TOPIC, 0, 5), (TOPIC, 1, 5)]
    finally:
        c.close()
        admin.close()
