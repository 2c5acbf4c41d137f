"""Topic configs over Kafka's admin APIs (confluent-kafka AdminClient, kafka-python KafkaAdminClient):
CreateTopics with configs, DescribeConfigs, IncrementalAlterConfigs and AlterConfigs; the values are the ones
HTTP shows, and a config the server does not support is refused by name."""

from __future__ import annotations

from contextlib import ExitStack

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
from kafka.admin import ConfigResource as PyConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kafka.errors import InvalidConfigurationError

from tests.kafka.conftest import KafkaServerProcess

DAY_MS = 86_400_000


def http_configs(server: KafkaServerProcess, topic: str) -> dict[str, dict[str, object]]:
    r = httpx.get(f"{server.url}/v1/topics/{topic}", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["configs"]


def describe(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([res])[res].result(20)


def test_topic_configs_through_the_admin_client(kafka_server: KafkaServerProcess, kafka_clients: ExitStack) -> None:
    admin = kafka_clients.enter_context(AdminClient({"bootstrap.servers": kafka_server.bootstrap}))
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


UNSUPPORTED = "cleanup.policy is not a supported topic config; the supported ones are retention.ms, retention.bytes"


def test_an_unsupported_config_is_named_through_the_admin_client(kafka_server: KafkaServerProcess,
                                                                 kafka_clients: ExitStack) -> None:
    """cleanup.policy=compact is refused as a config the server does not support (INVALID_CONFIG, naming the
    supported ones), not as a value that must be an integer; nothing is created or changed."""
    admin = kafka_clients.enter_context(AdminClient({"bootstrap.servers": kafka_server.bootstrap}))
    futures = admin.create_topics([NewTopic("compacted", 1, 1, config={"cleanup.policy": "compact"}),
                                   NewTopic("kept", 1, 1, config={"retention.ms": str(DAY_MS)})])
    futures["kept"].result(20)
    with pytest.raises(KafkaException) as refused:
        futures["compacted"].result(20)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert UNSUPPORTED in refused.value.args[0].str(), refused.value.args[0].str()
    assert "compacted" not in admin.list_topics(timeout=10).topics
    before = http_configs(kafka_server, "kept")

    for res in (ConfigResource(ConfigResource.Type.TOPIC, "kept", incremental_configs=[
                    ConfigEntry("retention.bytes", "1000", incremental_operation=AlterConfigOpType.SET),
                    ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)]),
                ConfigResource(ConfigResource.Type.TOPIC, "kept", incremental_configs=[
                    ConfigEntry("cleanup.policy", None, incremental_operation=AlterConfigOpType.DELETE)])):
        with pytest.raises(KafkaException) as refused:
            admin.incremental_alter_configs([res])[res].result(20)
        assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
        assert UNSUPPORTED in refused.value.args[0].str(), refused.value.args[0].str()

    whole = ConfigResource(ConfigResource.Type.TOPIC, "kept", set_config={"cleanup.policy": "compact"})
    with pytest.raises(KafkaException) as refused:
        admin.alter_configs([whole])[whole].result(20)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert UNSUPPORTED in refused.value.args[0].str(), refused.value.args[0].str()
    assert http_configs(kafka_server, "kept") == before  # nothing changed, retention.ms still set

    bad_value = ConfigResource(ConfigResource.Type.TOPIC, "kept", set_config={"retention.ms": "forever"})
    with pytest.raises(KafkaException) as refused:
        admin.alter_configs([bad_value])[bad_value].result(20)
    assert "retention.ms must be an integer, got 'forever'" in refused.value.args[0].str()


def test_an_unsupported_config_is_named_through_kafka_python(kafka_server: KafkaServerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka_server.bootstrap)
    try:
        with pytest.raises(InvalidConfigurationError) as refused:
            admin.create_topics({"compacted-kp": {"num_partitions": 1, "replication_factor": 1,
                                                  "configs": {"cleanup.policy": "compact"}}})
        assert UNSUPPORTED in str(refused.value), str(refused.value)
        assert "compacted-kp" not in admin.list_topics()
        admin.create_topics({"kept-kp": {"num_partitions": 1, "replication_factor": 1,
                                         "configs": {"retention.ms": str(DAY_MS)}}})
        before = http_configs(kafka_server, "kept-kp")
        for incremental in (True, False):
            res = PyConfigResource(ConfigResourceType.TOPIC, "kept-kp", configs={"cleanup.policy": "compact"})
            result = admin.alter_configs([res], raise_on_unknown=False, incremental=incremental)
            said = result["topic"]["kept-kp"]
            assert "InvalidConfigurationError" in said and UNSUPPORTED in said, (incremental, said)
        assert http_configs(kafka_server, "kept-kp") == before
    finally:
        admin.close()
