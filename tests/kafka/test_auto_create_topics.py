"""Topics created by a Kafka client's Metadata request (node settings auto_create_topics, on by default as Kafka's
auto.create.topics.enable, and default_partitions), against real `mqindex serve` processes: kcat and
confluent-kafka produce to a topic nobody created and read it back, a librdkafka consumer (which does not allow
auto-creation) creates nothing, an invalid name is refused, the setting off answers UNKNOWN_TOPIC_OR_PARTITION,
and with access rules only a caller allowed CREATE makes a topic."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType
from confluent_kafka.admin import ResourceType as AclResourceType

from api.kafka import errors
from api.security.scram import derive_credential
from tests.kafka.conftest import KafkaServerProcess
from tests.kafka.wire import Wire

METADATA = (3, 12)


def topic_partitions(s: KafkaServerProcess, topic: str) -> int | None:
    """The topic's partition count over HTTP; None when it does not exist."""
    r = httpx.get(f"{s.url}/v1/topics", timeout=10)
    r.raise_for_status()
    found = [t for t in r.json() if t["name"] == topic]
    return found[0]["partitions"] if found else None


def produce(conf: dict[str, str], topic: str, n: int) -> list[KafkaError | None]:
    """Delivery results of n records (None: delivered). A topic the cluster does not have fails its records with
    UNKNOWN_TOPIC_OR_PART once librdkafka stops waiting for it to appear (topic.metadata.propagation.max.ms)."""
    results: list[KafkaError | None] = []
    p = Producer(conf | {"acks": "all", "message.timeout.ms": 20_000, "topic.metadata.propagation.max.ms": 1_000})
    try:
        for i in range(n):
            p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), on_delivery=lambda e, m: results.append(e))
        p.flush(30)
    finally:
        p.purge()
    return results


@pytest.fixture
def three_partitions(tmp_path: Path) -> Iterator[KafkaServerProcess]:
    s = KafkaServerProcess(tmp_path / "node", "--default-partitions", "3").start()
    try:
        yield s
    finally:
        s.stop()


def test_kcat_produces_to_a_topic_nobody_created(kafka_server: KafkaServerProcess) -> None:
    lines = "".join(f"user-{i}:clicked {i}\n" for i in range(5))
    run = subprocess.run(["kcat", "-P", "-b", kafka_server.bootstrap, "-t", "clicks", "-K:"], input=lines,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "failed" not in run.stderr, run.stderr
    assert topic_partitions(kafka_server, "clicks") == 1  # default_partitions
    read = subprocess.run(["kcat", "-C", "-b", kafka_server.bootstrap, "-t", "clicks", "-e", "-f", "%k=%s\n"],
                          capture_output=True, text=True, timeout=60)
    assert read.stdout.splitlines() == [f"user-{i}=clicked {i}" for i in range(5)], read.stderr
    # its keys are indexed like those of any topic
    deadline = time.monotonic() + 30
    while True:
        r = httpx.get(f"{kafka_server.url}/v1/messages", params={"topic": "clicks", "key": "user-3"}, timeout=10)
        if r.status_code == 200 and r.json()["messages"] or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert [m["value"] for m in r.json()["messages"]] == ["clicked 3"], r.text


def test_default_partitions_and_consumers_that_do_not_create(three_partitions: KafkaServerProcess) -> None:
    s = three_partitions
    assert produce({"bootstrap.servers": s.bootstrap}, "orders", 30) == [None] * 30
    assert topic_partitions(s, "orders") == 3
    meta = AdminClient({"bootstrap.servers": s.bootstrap}).list_topics("orders", timeout=20)
    assert sorted(meta.topics["orders"].partitions) == [0, 1, 2]
    # librdkafka's consumers do not allow auto-creation (allow.auto.create.topics=false): nothing is created
    c = Consumer({"bootstrap.servers": s.bootstrap, "group.id": "g", "topic.metadata.refresh.interval.ms": 500})
    try:
        c.subscribe(["never-made"])
        seen = set()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error():
                seen.add(m.error().code())
    finally:
        c.close()
    assert topic_partitions(s, "never-made") is None
    assert seen <= {KafkaError.UNKNOWN_TOPIC_OR_PART}


def test_invalid_names_and_requests_that_do_not_allow_it(kafka_server: KafkaServerProcess) -> None:
    with Wire(kafka_server.kafka_port) as w:
        bad = w.call(METADATA, topics=[dict(name="bad/name")], allow_auto_topic_creation=True,
                     include_topic_authorized_operations=False).topics[0]
        assert bad.error_code == errors.INVALID_TOPIC_EXCEPTION
        no = w.call(METADATA, topics=[dict(name="not-asked")], allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False).topics[0]
        assert no.error_code == errors.UNKNOWN_TOPIC_OR_PARTITION
        # a listing of every topic (topics=None) creates nothing either
        everything = w.call(METADATA, topics=None, allow_auto_topic_creation=True,
                            include_topic_authorized_operations=False)
        assert [t.name for t in everything.topics] == []
        made = w.call(METADATA, topics=[dict(name="asked")], allow_auto_topic_creation=True,
                      include_topic_authorized_operations=False).topics[0]
        assert made.error_code == errors.NONE and made.name == "asked"
    assert topic_partitions(kafka_server, "not-asked") is None
    assert topic_partitions(kafka_server, "asked") == 1
    names = [t["name"] for t in httpx.get(f"{kafka_server.url}/v1/topics", timeout=10).json()]
    assert names == ["asked"]


def test_setting_off(tmp_path: Path) -> None:
    s = KafkaServerProcess(tmp_path / "node", "--auto-create-topics", "0").start()
    try:
        got = produce({"bootstrap.servers": s.bootstrap}, "typo-topic", 3)
        assert [e.code() if e else None for e in got] == [KafkaError.UNKNOWN_TOPIC_OR_PART] * 3
        assert topic_partitions(s, "typo-topic") is None
    finally:
        s.stop()


USERS = {"root": ("root-password-1", ["admin"]), "carol": ("carol-password-1", ["read", "produce", "admin"]),
         "alice": ("alice-password-1", ["read", "produce"])}


def kafka_topics(admin: AdminClient) -> dict[str, int]:
    """Topic -> partitions, as a Kafka client with every right sees them."""
    return {name: len(t.partitions) for name, t in admin.list_topics(timeout=20).topics.items()}


def sasl(s: KafkaServerProcess, user: str) -> dict[str, str]:
    return {"bootstrap.servers": s.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": USERS[user][0]}


def test_access_rules_decide_who_creates(tmp_path: Path) -> None:
    lines = ['superusers = ["root"]', f'audit_log = "{tmp_path / "audit.log"}"']
    for name, (password, scopes) in USERS.items():
        lines += [f"[users.{name}]", "scopes = " + json.dumps(scopes),
                  f'scram_sha_256 = "{derive_credential(password).encode()}"']
    (tmp_path / "mqindex.toml").write_text("\n".join(lines) + "\n")
    s = KafkaServerProcess(tmp_path / "node", "--config", str(tmp_path / "mqindex.toml")).start()
    try:
        rules = [AclBinding(AclResourceType.TOPIC, "carol.", ResourcePatternType.PREFIXED, "User:carol", "*", op,
                            AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.DESCRIBE)]
        rules += [AclBinding(AclResourceType.TOPIC, "alice.", ResourcePatternType.PREFIXED, "User:alice", "*", op,
                             AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.DESCRIBE)]
        rules.append(AclBinding(AclResourceType.TOPIC, "carol.allowed", ResourcePatternType.LITERAL, "User:carol",
                                "*", AclOperation.CREATE, AclPermissionType.ALLOW))
        admin = AdminClient(sasl(s, "root"))
        for f in admin.create_acls(rules).values():
            f.result(20)
        # CREATE on the topic: created, written
        assert produce(sasl(s, "carol"), "carol.allowed", 2) == [None, None]
        assert kafka_topics(admin) == {"carol.allowed": 1}
        # WRITE but no CREATE: refused, nothing created
        refused = produce(sasl(s, "carol"), "carol.refused", 1)
        assert [e.code() if e else None for e in refused] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
        assert kafka_topics(admin) == {"carol.allowed": 1}
        # scopes without admin never create (a read-only consumer keeps waiting for the topic), with WRITE and
        # DESCRIBE allowed: unknown
        unknown = produce(sasl(s, "alice"), "alice.new", 1)
        assert [e.code() if e else None for e in unknown] == [KafkaError.UNKNOWN_TOPIC_OR_PART]
        assert kafka_topics(admin) == {"carol.allowed": 1}
        audit = [json.loads(line) for line in (tmp_path / "audit.log").read_text().splitlines()]
        made = [a for a in audit if a.get("event") == "topic_create"]
        assert [(a.get("resource_name"), a.get("principal")) for a in made] == [("carol.allowed", "User:carol")], made
    finally:
        s.stop()
