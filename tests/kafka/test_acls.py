"""Kafka ACLs end to end on a real `mqindex serve`: rules created, listed and deleted with confluent-kafka's
AdminClient and kafka-python's KafkaAdminClient; a principal with READ on the prefix `team-a.` consumes
team-a.orders, is refused team-b.orders (TOPIC_AUTHORIZATION_FAILED) and does not see it in Metadata; produce
is refused without WRITE; a group it has no rule for is refused (GROUP_AUTHORIZATION_FAILED); a transactional
id without WRITE is refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED). Every denial is one audit line."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as PyResourceType

from api.security.scram import derive_credential
from tests.kafka.conftest import KafkaServerProcess

USERS = {"root": ("root-password-1", ["admin"]), "alice": ("alice-password-1", ["read", "produce"])}


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
    d = tmp_path_factory.mktemp("acls")
    s = KafkaServerProcess(d / "node", "--config", str(config(d))).start()
    try:
        yield s
    finally:
        s.stop()


def conf(s: KafkaServerProcess, user: str) -> dict[str, str]:
    return {"bootstrap.servers": s.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": USERS[user][0]}


def py_admin(s: KafkaServerProcess, user: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=s.bootstrap, security_protocol="SASL_PLAINTEXT",
                            sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=user,
                            sasl_plain_password=USERS[user][0])


def produce(c: dict[str, str], topic: str, n: int) -> list[KafkaError | None]:
    errors: list[KafkaError | None] = []
    p = Producer(c | {"acks": "all", "message.timeout.ms": 10_000, "retries": 0})
    try:
        for i in range(n):
            p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), on_delivery=lambda e, m: errors.append(e))
        p.flush(20)
    finally:
        p.purge()
        p.close()
    return errors


def mixed_produce(c: dict[str, str], topics: list[str]) -> dict[str, set[int | None]]:
    """Messages to several topics through one producer lingering so they share requests: codes per topic."""
    codes: dict[str, set[int | None]] = {t: set() for t in topics}
    p = Producer(c | {"acks": "all", "message.timeout.ms": 10_000, "retries": 0, "linger.ms": 200})
    try:
        for i in range(3):
            for t in topics:
                p.produce(t, value=f"m{i}".encode(),
                          on_delivery=lambda e, m: codes[m.topic()].add(e.code() if e else None))
        p.flush(20)
    finally:
        p.purge()
        p.close()
    return codes


def consume(c: dict[str, str], topic: str, group: str, n: int, timeout: float = 20) -> tuple[list[bytes], set[int]]:
    """Values read (up to n) and the error codes met before the deadline."""
    consumer = Consumer(c | {"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    values: list[bytes] = []
    codes: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(values) < n and not codes and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error():
                codes.add(m.error().code())
                continue
            values.append(m.value())
    finally:
        consumer.close()
    return values, codes


def acl(resource: ResourceType, name: str, pattern: ResourcePatternType, principal: str,
        op: AclOperation, permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(resource, name, pattern, principal, "*", op, permission)


def test_acls_through_confluent_and_kafka_python(server: KafkaServerProcess, kafka_clients: ExitStack) -> None:
    root = kafka_clients.enter_context(AdminClient(conf(server, "root")))
    for f in root.create_topics([NewTopic(t, 1, 1) for t in ("team-a.orders", "team-b.orders")]).values():
        f.result(20)
    assert produce(conf(server, "root"), "team-a.orders", 3) == [None] * 3  # superuser: no rule needed
    assert produce(conf(server, "root"), "team-b.orders", 3) == [None] * 3

    bindings = [acl(ResourceType.TOPIC, "team-a.", ResourcePatternType.PREFIXED, "User:alice", AclOperation.READ),
                acl(ResourceType.GROUP, "g-a", ResourcePatternType.LITERAL, "User:alice", AclOperation.READ)]
    for f in root.create_acls(bindings).values():
        f.result(20)
    listed = root.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                 AclOperation.ANY, AclPermissionType.ANY)).result(20)
    assert sorted(map(str, listed)) == sorted(map(str, bindings))

    alice = conf(server, "alice")
    values, codes = consume(alice, "team-a.orders", "g-a", 3)
    assert (values, codes) == ([b"v0", b"v1", b"v2"], set())
    _, codes = consume(alice, "team-b.orders", "g-a", 1)
    assert codes == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
    _, codes = consume(alice, "team-a.orders", "g-other", 1)  # no rule for this group
    assert codes == {KafkaError.GROUP_AUTHORIZATION_FAILED}
    seen = AdminClient(alice).list_topics(timeout=10).topics
    assert "team-a.orders" in seen and "team-b.orders" not in seen
    errors = produce(alice, "team-a.orders", 1)  # READ only: no WRITE
    assert [e.code() if e else None for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    p = Producer(alice | {"transactional.id": "tx-a"})
    try:
        with pytest.raises(KafkaException) as refused:  # a transactional id without WRITE on it
            p.init_transactions(10)
    finally:
        # the refusal is fatal to the producer: its close() closes it and raises that error again (a SystemError
        # around it in confluent-kafka 2.16)
        with suppress(KafkaException, SystemError):
            p.close()
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    alice_admin = kafka_clients.enter_context(AdminClient(alice))
    with pytest.raises(KafkaException) as not_admin:  # changing rules needs ALTER on the cluster (and admin)
        alice_admin.create_acls(bindings[:1])[bindings[0]].result(20)
    assert not_admin.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    # kafka-python's admin client: create, describe, delete
    py = py_admin(server, "root")
    try:
        write = ACL("User:alice", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
                    ResourcePattern(PyResourceType.TOPIC, "team-a.orders", ACLResourcePatternType.LITERAL))
        created = py.create_acls([write])
        assert created["failed"] == [] and len(created["succeeded"]) == 1
        assert produce(alice, "team-a.orders", 1) == [None]  # WRITE now
        # one producer, two topics in the same requests: the one without WRITE is refused, the other stored
        describe_b = ACL("User:alice", "*", ACLOperation.DESCRIBE, ACLPermissionType.ALLOW,
                         ResourcePattern(PyResourceType.TOPIC, "team-b.orders", ACLResourcePatternType.LITERAL))
        assert py.create_acls([describe_b])["failed"] == []
        assert mixed_produce(alice, ["team-a.orders", "team-b.orders"]) == {
            "team-a.orders": {None}, "team-b.orders": {KafkaError.TOPIC_AUTHORIZATION_FAILED}}
        py.delete_acls([ACLFilter("User:alice", None, ACLOperation.DESCRIBE, ACLPermissionType.ANY,
                                  ResourcePatternFilter(PyResourceType.TOPIC, "team-b.orders",
                                                        ACLResourcePatternType.LITERAL))])
        found, err = py.describe_acls(ACLFilter("User:alice", None, ACLOperation.ANY, ACLPermissionType.ANY,
                                                ResourcePatternFilter(PyResourceType.TOPIC, None,
                                                                      ACLResourcePatternType.ANY)))
        assert {(a.resource_pattern.resource_name, a.operation) for a in found} == {
            ("team-a.", ACLOperation.READ), ("team-a.orders", ACLOperation.WRITE)}
        gone = py.delete_acls([ACLFilter("User:alice", None, ACLOperation.WRITE, ACLPermissionType.ANY,
                                         ResourcePatternFilter(PyResourceType.TOPIC, None,
                                                               ACLResourcePatternType.ANY))])
        assert [len(matches) for _, matches, _ in gone] == [1]
    finally:
        py.close()
    errors = produce(alice, "team-a.orders", 1)
    assert [e.code() if e else None for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]

    deleted = root.delete_acls([AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice",
                                                 None, AclOperation.ANY, AclPermissionType.ANY)])
    assert sorted(map(str, next(iter(deleted.values())).result(20))) == sorted(map(str, bindings))

    audit = [json.loads(x) for x in (server.data_dir.parent / "audit.log").read_text().splitlines()]
    want = {"event": "denied", "principal": "User:alice", "resource_type": "topic", "resource_name": "team-b.orders",
            "result": "denied", "interface": "kafka"}
    assert any(want.items() <= a.items() for a in audit), audit
    assert sum(a["event"] == "acl_create" for a in audit) == 4
    assert {(a["resource_name"], a["result"]) for a in audit if a["event"] == "topic_create"} == {
        ("team-a.orders", "ok"), ("team-b.orders", "ok")}
    metrics = __import__("httpx").get(server.url + "/metrics").text
    assert 'mqindex_authorization_denials_total{interface="kafka",resource_type="topic"}' in metrics
