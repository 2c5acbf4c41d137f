"""Kafka's batch size limit on a real `mqindex serve`: a record batch over its topic's `max.message.bytes` (else the
server's `message_max_bytes`, 1,048,588 by default) is refused with MESSAGE_TOO_LARGE and nothing of it is stored,
the request's other partitions are served; the config is created, described, altered and refused as Kafka's
admin clients expect; HTTP produce holds each value to it."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import time
import uuid
import warnings
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import ConfigResource as PyConfigResource
from kafka.admin import ConfigResourceType
from kafka.errors import InvalidConfigurationError, MessageSizeTooLargeError
from kafka.record.default_records import DefaultRecordBatchBuilder

from api.kafka.schemas import APIS, build
from tests.kafka.conftest import KafkaServerProcess

DEFAULT = 1_048_588  # Kafka's message.max.bytes
ROOMY = 3_000_000
BIG = 2_000_000  # a record over the default limit, under ROOMY
MESSAGE_TOO_LARGE = 10


def _describe(admin: AdminClient, topic: str) -> ConfigEntry:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([res])[res].result(20)["max.message.bytes"]


def _alter(admin: AdminClient, topic: str, value: str | None) -> None:
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", value, incremental_operation=op)])
    admin.incremental_alter_configs([res])[res].result(20)


def _send(bootstrap: str, topic: str, value: bytes, conf: dict[str, Any] | None = None) -> KafkaError | None:
    """One record through a librdkafka producer allowed 3 MB messages: the error of its delivery report."""
    p = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": ROOMY, "acks": "all", "linger.ms": 0}
                 | (conf or {}))
    reports: list[KafkaError | None] = []
    p.produce(topic, value, key=b"k", partition=0, on_delivery=lambda err, _msg: reports.append(err))
    assert p.flush(30) == 0
    assert len(reports) == 1
    return reports[0]


def _ends(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{uuid.uuid4().hex[:6]}"})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return int(low), int(high)
    finally:
        c.close()


def _values(bootstrap: str, topic: str, expected: int, partition: int = 0) -> list[bytes]:
    """The values of the partition read from offset 0 by a librdkafka consumer on its default fetch sizes (1 MiB a
    partition: a batch larger than that is still given whole, as Kafka does)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        out: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(out) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                out.append(m.value())
        return out
    finally:
        c.close()


def test_a_batch_over_the_topic_limit_is_refused_and_one_under_it_is_read_back(
        kafka_server: KafkaServerProcess, kafka_clients: ExitStack) -> None:
    boot = kafka_server.bootstrap
    admin = kafka_clients.enter_context(AdminClient({"bootstrap.servers": boot}))
    made = admin.create_topics([NewTopic("plain", 1, 1),
                                NewTopic("roomy", 1, 1, config={"max.message.bytes": str(ROOMY)})])
    for f in made.values():
        f.result(20)
    big = os.urandom(BIG)  # random: compressed or not, its batch stays over 1 MiB

    err = _send(boot, "plain", big)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, err
    assert _send(boot, "plain", b"small") is None
    assert _ends(boot, "plain") == (0, 1)  # the refused record took no offset
    assert _values(boot, "plain", 1) == [b"small"]

    assert _send(boot, "roomy", big) is None
    assert _send(boot, "roomy", big, {"compression.type": "zstd"}) is None
    assert _values(boot, "roomy", 2) == [big, big]  # byte-identical, through the default fetch sizes

    # the size is the batch as sent, after compression: 2 MB of one byte compress far under the limit
    assert _send(boot, "plain", b"a" * BIG, {"compression.type": "gzip"}) is None
    err = _send(boot, "plain", big, {"compression.type": "lz4"})
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, err
    assert _ends(boot, "plain") == (0, 2)

    shown = _describe(admin, "roomy")
    assert (shown.value, shown.source, shown.is_default) == (str(ROOMY), ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
                                                             False)
    shown = _describe(admin, "plain")
    assert (shown.value, shown.source, shown.is_default) == (str(DEFAULT), ConfigSource.DEFAULT_CONFIG.value, True)
    configs = httpx.get(f"{kafka_server.url}/v1/topics/roomy", timeout=10).json()["configs"]
    assert configs["max.message.bytes"] == {"value": ROOMY, "source": "topic"}


def test_an_idempotent_producer_goes_on_after_a_refusal(kafka_server: KafkaServerProcess,
                                                         kafka_clients: ExitStack) -> None:
    """librdkafka's idempotent producer: the refused batch took a sequence, and its next records are stored in
    order (the broker's sequence checks accept what the client sends after the refusal)."""
    boot = kafka_server.bootstrap
    admin = kafka_clients.enter_context(AdminClient({"bootstrap.servers": boot}))
    admin.create_topics([NewTopic("idem", 1, 1)])["idem"].result(20)
    p = Producer({"bootstrap.servers": boot, "enable.idempotence": True, "message.max.bytes": ROOMY,
                  "linger.ms": 5})
    reports: list[tuple[bytes, KafkaError | None]] = []

    def done(err: KafkaError | None, msg: Any) -> None:
        reports.append((msg.value()[:8], err))

    p.produce("idem", b"first", on_delivery=done)
    assert p.flush(30) == 0
    p.produce("idem", b"too-big-" + os.urandom(BIG), on_delivery=done)
    assert p.flush(30) == 0
    for i in range(3):
        p.produce("idem", b"after-%d" % i, on_delivery=done)
    assert p.flush(30) == 0
    assert [(v, None if e is None else e.code()) for v, e in reports] == [
        (b"first", None), (b"too-big-", KafkaError.MSG_SIZE_TOO_LARGE), (b"after-0", None), (b"after-1", None),
        (b"after-2", None)]
    assert _values(boot, "idem", 4) == [b"first", b"after-0", b"after-1", b"after-2"]


def test_altering_the_limit_counts_from_the_next_produce(kafka_server: KafkaServerProcess,
                                                          kafka_clients: ExitStack) -> None:
    boot = kafka_server.bootstrap
    admin = kafka_clients.enter_context(AdminClient({"bootstrap.servers": boot}))
    admin.create_topics([NewTopic("grows", 1, 1)])["grows"].result(20)
    big = os.urandom(BIG)
    assert _send(boot, "grows", big).code() == KafkaError.MSG_SIZE_TOO_LARGE  # type: ignore[union-attr]

    _alter(admin, "grows", str(ROOMY))
    assert _send(boot, "grows", big) is None
    _alter(admin, "grows", "1000")  # lowered: a batch of 2,000 bytes no longer fits
    assert _send(boot, "grows", os.urandom(2000)).code() == KafkaError.MSG_SIZE_TOO_LARGE  # type: ignore[union-attr]
    assert _send(boot, "grows", b"fits") is None
    _alter(admin, "grows", None)  # back to the server's default
    assert _describe(admin, "grows").source == ConfigSource.DEFAULT_CONFIG.value
    assert _send(boot, "grows", big).code() == KafkaError.MSG_SIZE_TOO_LARGE  # type: ignore[union-attr]
    assert _send(boot, "grows", os.urandom(2000)) is None
    assert _ends(boot, "grows") == (0, 3)

    # AlterConfigs replaces the topic's configs: one that does not name max.message.bytes resets it
    _alter(admin, "grows", str(ROOMY))
    whole = ConfigResource(ConfigResource.Type.TOPIC, "grows", set_config={"retention.ms": "86400000"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # AlterConfigs: deprecated in Kafka, still served
        admin.alter_configs([whole])[whole].result(20)
    assert _describe(admin, "grows").value == str(DEFAULT)
    assert _send(boot, "grows", big).code() == KafkaError.MSG_SIZE_TOO_LARGE  # type: ignore[union-attr]


def test_a_bad_value_is_refused_and_changes_nothing(kafka_server: KafkaServerProcess,
                                                     kafka_clients: ExitStack) -> None:
    admin = kafka_clients.enter_context(AdminClient({"bootstrap.servers": kafka_server.bootstrap}))
    futures = admin.create_topics([NewTopic("neg", 1, 1, config={"max.message.bytes": "-1"}),
                                   NewTopic("word", 1, 1, config={"max.message.bytes": "lots"}),
                                   NewTopic("huge", 1, 1, config={"max.message.bytes": str(1 << 31)}),
                                   NewTopic("kept", 1, 1, config={"max.message.bytes": "5000"})])
    futures["kept"].result(20)
    said = {}
    for name in ("neg", "word", "huge"):
        with pytest.raises(KafkaException) as refused:
            futures[name].result(20)
        assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
        said[name] = refused.value.args[0].str()
    assert "max.message.bytes must be an integer from 0 to 2147483647 (bytes of a record batch), got -1" in said["neg"]
    assert "max.message.bytes must be an integer, got 'lots'" in said["word"]
    assert "got 2147483648" in said["huge"]
    assert not {"neg", "word", "huge"} & set(admin.list_topics(timeout=10).topics)

    for value in ("-5", "1.5"):
        res = ConfigResource(ConfigResource.Type.TOPIC, "kept", incremental_configs=[
            ConfigEntry("max.message.bytes", value, incremental_operation=AlterConfigOpType.SET)])
        with pytest.raises(KafkaException) as refused:
            admin.incremental_alter_configs([res])[res].result(20)
        assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
        assert "max.message.bytes must be an integer" in refused.value.args[0].str()
    assert _describe(admin, "kept").value == "5000"

    r = httpx.patch(f"{kafka_server.url}/v1/topics/kept/configs", json={"configs": {"max.message.bytes": -1}},
                    timeout=10)
    assert r.status_code == 400 and r.json()["field"] == "configs.max.message.bytes", r.text
    assert "must be an integer from 0 to 2147483647" in r.json()["error"]
    assert _describe(admin, "kept").value == "5000"


def _frame(api_key: int, version: int, correlation_id: int, **fields: Any) -> bytes:
    req = build(APIS[api_key].request, version, **fields)
    req.with_header(correlation_id=correlation_id, client_id="max-message-bytes-test")
    body = bytes(req.encode(header=True))
    return struct.pack(">i", len(body)) + body


def _answer(s: socket.socket, api_key: int, version: int) -> Any:
    head = b""
    while len(head) < 4:
        head += s.recv(4 - len(head))
    (size,) = struct.unpack(">i", head)
    body = bytearray()
    while len(body) < size:
        chunk = s.recv(size - len(body))
        assert chunk, "connection closed"
        body += chunk
    return APIS[api_key].response.decode(bytes(body[4:]), version=version)


def _batch(values: list[bytes]) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 24)
    for i, v in enumerate(values):
        b.append(i, timestamp=None, key=None, value=v, headers=[])
    return bytes(b.build())


def test_one_request_refuses_only_the_partition_over_the_limit(kafka_server: KafkaServerProcess,
                                                                kafka_clients: ExitStack) -> None:
    """A raw Produce (v8: the first with error messages) naming three partitions: the one with a batch over the
    limit is MESSAGE_TOO_LARGE with a message naming topic, partition, size and limit, and stores nothing, not
    even the small batch sent beside the big one; the other two are stored. A batch exactly at the limit is
    taken (Kafka refuses only over it)."""
    admin = kafka_clients.enter_context(AdminClient({"bootstrap.servers": kafka_server.bootstrap}))
    admin.create_topics([NewTopic("mixed", 3, 1)])["mixed"].result(20)
    small, big = _batch([b"small"]), _batch([os.urandom(BIG)])
    fill = DEFAULT - 80
    while len(exact := _batch([b"x" * fill])) != DEFAULT:  # the record's varints grow with the value
        fill += DEFAULT - len(exact)
    with socket.create_connection(("127.0.0.1", kafka_server.kafka_port), timeout=30) as s:
        s.sendall(_frame(0, 8, 1, transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[dict(
            name="mixed", partition_data=[dict(index=0, records=small), dict(index=1, records=small + big),
                                          dict(index=2, records=exact)])]))
        got = {p.index: p for t in _answer(s, 0, 8).responses for p in t.partition_responses}
    assert (got[0].error_code, got[0].base_offset) == (0, 0)
    assert (got[2].error_code, got[2].base_offset) == (0, 0)
    assert got[1].error_code == MESSAGE_TOO_LARGE
    assert got[1].error_message == (
        f"the record batch of {len(big)} bytes for topic 'mixed' partition 1 is over its max.message.bytes of "
        f"{DEFAULT} (the server's message_max_bytes, the topic setting none; set max.message.bytes on the topic to "
        "take more)")
    assert [_ends(kafka_server.bootstrap, "mixed", p) for p in range(3)] == [(0, 1), (0, 0), (0, 1)]


def test_kafka_python_producer_and_admin(kafka_server: KafkaServerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka_server.bootstrap)
    producer = KafkaProducer(bootstrap_servers=kafka_server.bootstrap, max_request_size=ROOMY, acks="all")
    try:
        admin.create_topics({"kp-plain": {"num_partitions": 1, "replication_factor": 1},
                             "kp-roomy": {"num_partitions": 1, "replication_factor": 1,
                                          "configs": {"max.message.bytes": str(ROOMY)}}})
        with pytest.raises(InvalidConfigurationError) as refused:
            admin.create_topics({"kp-bad": {"num_partitions": 1, "replication_factor": 1,
                                            "configs": {"max.message.bytes": "-2"}}})
        assert "max.message.bytes must be an integer from 0 to 2147483647" in str(refused.value)
        big = os.urandom(BIG)
        assert producer.send("kp-roomy", big, partition=0).get(30).offset == 0
        assert producer.send("kp-plain", b"small", partition=0).get(30).offset == 0
        # last: kafka-python's idempotent producer (its default) takes any error it cannot retry as fatal
        with pytest.raises(MessageSizeTooLargeError, match="is over its max.message.bytes of 1048588"):
            producer.send("kp-plain", big, partition=0).get(30)
        resources = [PyConfigResource(ConfigResourceType.TOPIC, t) for t in ("kp-roomy", "kp-plain")]
        shown = admin.describe_configs(resources, config_filter="all")["topic"]
        assert {k: shown["kp-roomy"]["max.message.bytes"][k] for k in ("value", "config_source")} == {
            "value": str(ROOMY), "config_source": "DYNAMIC_TOPIC_CONFIG"}
        assert {k: shown["kp-plain"]["max.message.bytes"][k] for k in ("value", "config_source")} == {
            "value": str(DEFAULT), "config_source": "DEFAULT_CONFIG"}
    finally:
        producer.close()
        admin.close()
    assert _values(kafka_server.bootstrap, "kp-roomy", 1) == [big]
    assert _ends(kafka_server.bootstrap, "kp-plain") == (0, 1)


def test_http_values_over_a_lowered_limit_are_refused(kafka_server: KafkaServerProcess) -> None:
    url = kafka_server.url
    assert httpx.post(f"{url}/v1/topics", json={"name": "tight", "configs": {"max.message.bytes": 1000}},
                      timeout=10).status_code == 201
    assert httpx.post(f"{url}/v1/topics", json={"name": "loose"}, timeout=10).status_code == 201
    r = httpx.post(f"{url}/v1/topics/tight/messages", timeout=30, json={"messages": [
        {"value": "fits", "partition": 0}, {"value": "x" * 1001, "partition": 0}]})
    assert r.status_code == 413, r.text
    assert r.json() == {"field": "messages.1.value", "error": (
        "messages.1.value is 1001 bytes, over the limit of topic 'tight' partition 0: max.message.bytes of 1000 "
        "(the topic's)")}
    page = httpx.get(f"{url}/v1/topics/tight/partitions/0/messages", timeout=10).json()
    assert page["messages"] == [] and page["next_offset"] == 0  # nothing of the request stored
    # many values that fit each are taken, though the batch the broker builds of them is over the limit
    r = httpx.post(f"{url}/v1/topics/tight/messages", timeout=30,
                   json={"messages": [{"value": "y" * 1000, "partition": 0} for _ in range(5)]})
    assert r.status_code == 200, r.text
    # on the server's default, HTTP's own limit of 1 MiB a value still holds, both ways
    one_mib = 1 << 20
    r = httpx.post(f"{url}/v1/topics/loose/messages", json={"messages": [{"value": "z" * one_mib}]}, timeout=30)
    assert r.status_code == 200, r.text
    r = httpx.post(f"{url}/v1/topics/loose/messages", json={"messages": [{"value": "z" * (one_mib + 1)}]},
                   timeout=30)
    assert r.status_code == 413, r.text


def test_the_server_default_is_a_serve_setting(tmp_path: Path, kafka_clients: ExitStack) -> None:
    server = KafkaServerProcess(tmp_path / "node", "--message-max-bytes", "5000").start()
    try:
        eff = httpx.get(server.url + "/v1/config", timeout=10).json()
        assert eff["broker"]["message_max_bytes"] == 5000
        admin = kafka_clients.enter_context(AdminClient({"bootstrap.servers": server.bootstrap}))
        admin.create_topics([NewTopic("five", 1, 1)])["five"].result(20)
        shown = _describe(admin, "five")
        assert (shown.value, shown.source) == ("5000", ConfigSource.DEFAULT_CONFIG.value)
        err = _send(server.bootstrap, "five", os.urandom(6000))
        assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
        assert _send(server.bootstrap, "five", os.urandom(4000)) is None
        r = httpx.post(f"{server.url}/v1/topics/five/messages", json={"messages": [{"value": "v" * 5001}]},
                       timeout=10)
        assert r.status_code == 413 and "the server's message_max_bytes" in r.json()["error"], r.text
        # the topics CLI sets and removes it; a produce after the change meets the new limit
        topics = [str(Path(sys.executable).parent / "mqindex"), "topics"]
        out = subprocess.run([*topics, "alter", "five", "--max-message-bytes", "7000", "--url", server.url],
                             capture_output=True, text=True, check=True).stdout
        assert "max.message.bytes=7000  (topic)" in out, out
        assert _send(server.bootstrap, "five", os.urandom(6000)) is None
        bad = subprocess.run([*topics, "alter", "five", "--max-message-bytes", "-1", "--url", server.url],
                             capture_output=True, text=True)
        assert bad.returncode == 1 and "max.message.bytes must be an integer from 0" in bad.stderr, bad.stderr
        out = subprocess.run([*topics, "alter", "five", "--delete-config", "max.message.bytes", "--url", server.url],
                             capture_output=True, text=True, check=True).stdout
        assert "max.message.bytes=5000  (default)" in out, out
    finally:
        assert server.stop() == 0
