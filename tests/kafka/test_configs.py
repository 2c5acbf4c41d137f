"""Topic configs over Kafka's admin APIs (confluent-kafka AdminClient): CreateTopics with configs,
DescribeConfigs, IncrementalAlterConfigs and AlterConfigs; the values are the ones HTTP shows."""

from __future__ import annotations

import httpx
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

from tests.kafka.conftest import KafkaServerProcess

DAY_MS = 86_400_000


def http_configs(server: KafkaServerProcess, topic: str) -> dict[str, dict[str, object]]:
    r = httpx.get(f"{server.url}/v1/topics/{topic}", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["configs"]


def describe(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([res])[res].result(20)


def test_topic_configs_through_the_admin_client(kafka_server: KafkaServerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_server.bootstrap})
    futures = admin.create_topics([NewTopic("cfg", 2, 1, config={"retention.ms": str(2 * DAY_MS)}),
                                   NewTopic("bad-cfg", 1, 1, config={"cleanup.policy": "compact"}),
                                   NewTopic("bad-value", 1, 1, config={"retention.bytes": "lots"})])
    futures["cfg"].result(20)
    for name in ("bad-cfg", "bad-value"):
        with pytest.raises(KafkaException) as refused:
            futures[name].result(20)
        assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "bad-cfg" not in admin.list_topics(timeout=10).topics  # nothing created for a refused topic
    assert http_configs(kafka_server, "cfg")["retention.ms"] == {"value": 2 * DAY_MS, "source": "topic"}

    shown = describe(admin, "cfg")
    assert shown["retention.ms"].value == str(2 * DAY_MS)
    assert shown["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert shown["retention.bytes"].value == "-1" and shown["retention.bytes"].is_default

    res = ConfigResource(ConfigResource.Type.TOPIC, "cfg", incremental_configs=[
        ConfigEntry("retention.bytes", str(1 << 30), incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([res])[res].result(20)
    stored = http_configs(kafka_server, "cfg")
    assert stored["retention.bytes"] == {"value": 1 << 30, "source": "topic"}
    assert stored["retention.ms"]["source"] == "default"
    assert describe(admin, "cfg")["retention.bytes"].value == str(1 << 30)

    bad = ConfigResource(ConfigResource.Type.TOPIC, "cfg", incremental_configs=[
        ConfigEntry("segment.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([bad])[bad].result(20)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert http_configs(kafka_server, "cfg") == stored  # a refused change leaves the configs as they were

    whole = ConfigResource(ConfigResource.Type.TOPIC, "cfg", set_config={"retention.ms": str(DAY_MS)})
    admin.alter_configs([whole])[whole].result(20)  # replaces: retention.bytes goes back to the default
    stored = http_configs(kafka_server, "cfg")
    assert stored["retention.ms"] == {"value": DAY_MS, "source": "topic"}
    assert stored["retention.bytes"]["source"] == "default"

    missing = ConfigResource(ConfigResource.Type.TOPIC, "no-such-topic")
    with pytest.raises(KafkaException) as unknown:
        admin.describe_configs([missing])[missing].result(20)
    assert unknown.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
