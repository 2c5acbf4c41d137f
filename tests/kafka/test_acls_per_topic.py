"""Per-topic answers to Kafka requests naming an allowed and a refused topic, on a real `mqindex serve`: one
confluent-kafka consumer assigned to both topics gets the allowed topic's records and TOPIC_AUTHORIZATION_FAILED
for the other (one Fetch naming both), and its OffsetCommit of both stores only the allowed one; ListOffsets and
OffsetFetch sent by kafka-python's client naming both answer per topic; DeleteTopics and DescribeConfigs too.
An idempotent producer (InitProducerId without a transactional id) needs IDEMPOTENT_WRITE on the cluster or
WRITE on some topic, as Kafka's, else CLUSTER_AUTHORIZATION_FAILED."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka.admin import KafkaAdminClient

from api.kafka.schemas import APIS, build
from api.security.scram import derive_credential
from tests.kafka.conftest import KafkaServerProcess
from tests.kafka.test_acls import produce

USERS = {"root": ("root-password-1", ["admin"]), "alice": ("alice-password-1", ["read", "produce", "admin"]),
         "bob": ("bob-password-1", ["produce"]), "carol": ("carol-password-1", ["produce"])}
A, B, C = "team-a.orders", "team-b.orders", "team-c.orders"
TOPIC_AUTHORIZATION_FAILED = 29


def config(d: Path) -> Path:
    lines = ['superusers = ["root"]', f'audit_log = "{d / "audit.log"}"']
    for name, (password, scopes) in USERS.items():
        lines += [f"[users.{name}]", "scopes = " + json.dumps(scopes),
                  f'scram_sha_256 = "{derive_credential(password).encode()}"']
    path = d / "mqindex.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServerProcess]:
    d = tmp_path_factory.mktemp("acls-per-topic")
    s = KafkaServerProcess(d / "node", "--config", str(config(d))).start()
    try:
        yield s
    finally:
        s.stop()


def py_admin(s: KafkaServerProcess, user: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=s.bootstrap, security_protocol="SASL_PLAINTEXT",
                            sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=user,
                            sasl_plain_password=USERS[user][0])


def send(py: KafkaAdminClient, request: Any) -> Any:
    """One request as built, through the admin client's authenticated connection; its response."""
    async def call() -> Any:
        return await py._manager.send(request)
    return py._manager.run(call)


def conf(s: KafkaServerProcess, user: str) -> dict[str, str]:
    return {"bootstrap.servers": s.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": USERS[user][0]}


def denials(s: KafkaServerProcess, topic: str) -> int:
    """The audit log's denial lines for `topic`."""
    lines = [json.loads(x) for x in (s.data_dir.parent / "audit.log").read_text().splitlines()]
    return sum(a["event"] == "denied" and a["resource_name"] == topic for a in lines)


def allow(principal: str, resource: ResourceType, name: str, op: AclOperation,
          pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(resource, name, pattern, principal, "*", op, AclPermissionType.ALLOW)


def grant(s: KafkaServerProcess, *bindings: AclBinding) -> None:
    with AdminClient(conf(s, "root")) as admin:
        for f in admin.create_acls(list(bindings)).values():
            f.result(20)


def test_a_request_naming_an_allowed_and_a_refused_topic_is_answered_per_topic(server: KafkaServerProcess,
                                                                               kafka_clients: ExitStack) -> None:
    root = kafka_clients.enter_context(AdminClient(conf(server, "root")))
    for f in root.create_topics([NewTopic(t, 1, 1) for t in (A, B, C, "team-a.old", "team-b.old")]).values():
        f.result(20)
    for t in (A, B):
        assert produce(conf(server, "root"), t, 3) == [None] * 3
    # alice: READ on team-a.*, DESCRIBE (not READ) on team-b.orders so her client asks for it, the group
    grant(server, allow("User:alice", ResourceType.TOPIC, "team-a.", AclOperation.READ, ResourcePatternType.PREFIXED),
          allow("User:alice", ResourceType.TOPIC, "team-a.", AclOperation.DELETE, ResourcePatternType.PREFIXED),
          allow("User:alice", ResourceType.TOPIC, B, AclOperation.DESCRIBE),
          allow("User:alice", ResourceType.GROUP, "g-mix", AclOperation.READ))

    consumer = Consumer(conf(server, "alice") | {"group.id": "g-mix", "enable.auto.commit": False,
                                                 "auto.offset.reset": "earliest"})
    try:
        # Fetch naming both (one broker, one request): the records of A, the authorization error for B
        consumer.assign([TopicPartition(A, 0, 0), TopicPartition(B, 0, 0)])
        values: list[tuple[str, bytes]] = []
        refused: set[tuple[str, int]] = set()
        deadline = time.monotonic() + 30
        while (len(values) < 3 or not refused) and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error():
                refused.add((m.topic(), m.error().code()))
            else:
                values.append((m.topic(), m.value()))
        assert values == [(A, b"v0"), (A, b"v1"), (A, b"v2")]
        assert refused == {(B, KafkaError.TOPIC_AUTHORIZATION_FAILED)}

        # OffsetCommit naming both: A's offset stored, B refused
        with pytest.raises(KafkaException) as partly:
            consumer.commit(offsets=[TopicPartition(A, 0, 2), TopicPartition(B, 0, 2)], asynchronous=False)
        assert partly.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        consumer.close()
    # ListOffsets and OffsetFetch naming A and C (not even DESCRIBE on C: a client would not ask), as sent
    py = py_admin(server, "alice")
    try:
        listed = send(py, build(APIS[2].request, 5, replica_id=-1, isolation_level=0,
                                                         topics=[dict(name=t, partitions=[dict(
                                                             partition_index=0, timestamp=-1)]) for t in (A, C)]))
        assert [(t.name, [(p.error_code, p.offset) for p in t.partitions]) for t in listed.topics] == [
            (A, [(0, 3)]), (C, [(TOPIC_AUTHORIZATION_FAILED, -1)])]
        assert denials(server, C) == 1  # one audit line for the one refusal
        fetched = send(py, build(APIS[9].request, 7, group_id="g-mix", require_stable=False,
                                                          topics=[dict(name=t, partition_indexes=[0]) for t in (A, C)]))
        assert fetched.error_code == 0
        assert [(t.name, [(p.error_code, p.committed_offset) for p in t.partitions]) for t in fetched.topics] == [
            (A, [(0, 2)]), (C, [(TOPIC_AUTHORIZATION_FAILED, -1)])]
        assert denials(server, C) == 2
    finally:
        py.close()
    # root sees that nothing was committed for B
    check = Consumer(conf(server, "root") | {"group.id": "g-mix"})
    try:
        assert [tp.offset for tp in check.committed([TopicPartition(A, 0), TopicPartition(B, 0)], timeout=20)] == [
            2, -1001]
    finally:
        check.close()

    # DeleteTopics and DescribeConfigs naming both
    alice = kafka_clients.enter_context(AdminClient(conf(server, "alice")))
    deleted = alice.delete_topics(["team-a.old", "team-b.old"], operation_timeout=20)
    deleted["team-a.old"].result(20)
    with pytest.raises(KafkaException) as not_deleted:
        deleted["team-b.old"].result(20)
    assert not_deleted.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "team-b.old" in root.list_topics(timeout=10).topics and "team-a.old" not in root.list_topics().topics
    grant(server, allow("User:alice", ResourceType.TOPIC, A, AclOperation.DESCRIBE_CONFIGS))
    described = alice.describe_configs([ConfigResource("topic", A), ConfigResource("topic", B)])
    assert "retention.ms" in described[ConfigResource("topic", A)].result(20)
    with pytest.raises(KafkaException) as not_described:
        described[ConfigResource("topic", B)].result(20)
    assert not_described.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_create_partitions_needs_alter_on_each_topic(server: KafkaServerProcess, kafka_clients: ExitStack) -> None:
    """CreatePartitions naming two topics, the caller allowed to alter one: that one grows, the other is refused
    with TOPIC_AUTHORIZATION_FAILED (Kafka's ALTER on the topic) and keeps its count."""
    root = kafka_clients.enter_context(AdminClient(conf(server, "root")))
    grown, kept = "team-a.grown", "team-b.kept"
    for f in root.create_topics([NewTopic(t, 1, 1) for t in (grown, kept)]).values():
        f.result(20)
    grant(server, allow("User:alice", ResourceType.TOPIC, grown, AclOperation.ALTER),
          allow("User:alice", ResourceType.TOPIC, kept, AclOperation.DESCRIBE))
    alice = kafka_clients.enter_context(AdminClient(conf(server, "alice")))
    asked = alice.create_partitions([NewPartitions(grown, 3), NewPartitions(kept, 3)])
    asked[grown].result(30)
    with pytest.raises(KafkaException) as refused:
        asked[kept].result(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    counts = {t: len(root.list_topics(t, timeout=10).topics[t].partitions) for t in (grown, kept)}
    assert counts == {grown: 3, kept: 1}
    assert denials(server, kept) >= 1


def idempotent_errors(s: KafkaServerProcess, user: str, topic: str) -> set[int]:
    """The error codes an idempotent producer meets producing one message (none: stored)."""
    seen: list[KafkaError] = []
    p = Producer(conf(s, user) | {"enable.idempotence": True, "message.timeout.ms": 10_000,
                                  "error_cb": seen.append})
    try:
        p.produce(topic, value=b"x", on_delivery=lambda e, m: seen.append(e) if e else None)
        p.flush(20)
    except (KafkaException, SystemError) as exc:  # a fatal error (the producer id refused) ends the producer;
        fatal = exc if isinstance(exc, KafkaException) else exc.__cause__  # raised through a callback: its cause
        assert isinstance(fatal, KafkaException), exc
        seen.append(fatal.args[0])
    finally:
        p.purge()
        p.close()
    return {e.code() for e in seen}


def test_an_idempotent_producer_needs_idempotent_write_or_write_on_some_topic(server: KafkaServerProcess) -> None:
    with AdminClient(conf(server, "root")) as root:
        for f in root.create_topics([NewTopic(t, 1, 1) for t in ("idem.b", "idem.c")]).values():
            f.result(20)
    grant(server, allow("User:bob", ResourceType.TOPIC, "idem.b", AclOperation.DESCRIBE))
    assert KafkaError.CLUSTER_AUTHORIZATION_FAILED in idempotent_errors(server, "bob", "idem.b")
    grant(server, allow("User:bob", ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE),
          allow("User:bob", ResourceType.TOPIC, "idem.b", AclOperation.WRITE))
    assert idempotent_errors(server, "bob", "idem.b") == set()
    # WRITE on some topic is enough (here a prefix), no IDEMPOTENT_WRITE
    grant(server, allow("User:carol", ResourceType.TOPIC, "idem.c", AclOperation.WRITE, ResourcePatternType.PREFIXED))
    assert idempotent_errors(server, "carol", "idem.c") == set()
    audit = [json.loads(x) for x in (server.data_dir.parent / "audit.log").read_text().splitlines()]
    assert any(a["event"] == "denied" and a["principal"] == "User:bob" and a["operation"] == "idempotent_write"
               for a in audit), audit
