"""max.message.bytes as a topic config (its range, its default, how it is described) and each topic's limit as the
produce paths read it (broker/partitions/message_size.py): kept while the stored configs stay the same, damage
logged and taken as the server's limit."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from broker.errors import InvalidField
from broker.partitions import topic_config
from broker.partitions.client_messages import InMessage
from broker.partitions.message_size import Limit, MessageTooLarge, TopicLimits, check_values


class _Image:
    """The one MetadataClient call TopicLimits makes, over a dict."""

    def __init__(self) -> None:
        self.kv: dict[str, str] = {}
        self.asked: list[bool] = []

    def kv_get(self, key: str, refresh: bool = True) -> str | None:
        self.asked.append(refresh)
        return self.kv.get(key)


@pytest.mark.parametrize("value", [0, 1, 1_048_588, (1 << 31) - 1])
def test_max_message_bytes_takes_kafkas_int_range(value: int) -> None:
    assert topic_config.check_configs({"max.message.bytes": value}) == {"max.message.bytes": value}


@pytest.mark.parametrize("value", [-1, -5, 1 << 31, True, "100", 1.5])
def test_max_message_bytes_refuses_the_rest_naming_the_rule(value: Any) -> None:
    with pytest.raises(InvalidField) as refused:
        topic_config.check_configs({"max.message.bytes": value})
    assert refused.value.field == "configs.max.message.bytes"
    assert str(refused.value) == (f"configs.max.message.bytes must be an integer from 0 to 2147483647 (bytes of a "
                                  f"record batch), got {value!r}")


def test_the_retention_rule_is_unchanged() -> None:
    with pytest.raises(InvalidField, match=r"must be an integer, -1 \(unlimited\) or 1 to 2\*\*63-1, got 0"):
        topic_config.check_configs({"retention.ms": 0})


def test_described_with_the_server_default() -> None:
    defaults = topic_config.ServerDefaults(max_message_bytes=5000)
    assert topic_config.describe({}, defaults)["max.message.bytes"] == {"value": 5000, "source": "default"}
    assert topic_config.describe({"max.message.bytes": 7}, defaults)["max.message.bytes"] == {
        "value": 7, "source": "topic"}
    assert topic_config.ServerDefaults().max_message_bytes == topic_config.DEFAULT_MAX_MESSAGE_BYTES == 1_048_588


def test_topic_limits_follow_the_stored_configs(caplog: pytest.LogCaptureFixture) -> None:
    image = _Image()
    limits = TopicLimits(image, 2000)  # type: ignore[arg-type]
    assert limits.of("t") == Limit(2000, "server")
    image.kv["topic_configs/t"] = topic_config.encode({"max.message.bytes": 70, "retention.ms": 5})
    assert limits.of("t") == Limit(70, "topic")
    image.kv["topic_configs/t"] = topic_config.encode({"retention.ms": 5})  # altered: counts at once
    assert limits.of("t") == Limit(2000, "server")
    image.kv["topic_configs/t"] = '{"max.message.bytes": -3}'
    with caplog.at_level(logging.ERROR, logger="mqindex.broker.message_size"):
        assert limits.of("t") == Limit(2000, "server")
        assert limits.of("t") == Limit(2000, "server")
    assert [r.getMessage() for r in caplog.records] == ["topic configs unreadable; produce takes the server's "
                                                        "message_max_bytes"]  # once, not per produce
    del image.kv["topic_configs/t"]
    assert limits.of("t") == Limit(2000, "server")
    assert not any(image.asked)  # the node's image as it is: no catch-up on the produce path


def test_check_values_names_the_first_value_over_the_limit() -> None:
    msgs = [InMessage(value=b"x" * 10), InMessage(value=None, key=b"k" * 50), InMessage(value=b"y" * 11)]
    check_values("t", 0, msgs, [0, 1, 2], Limit(11, "topic"))
    with pytest.raises(MessageTooLarge) as refused:
        check_values("t", 3, msgs, [4, 7, 9], Limit(10, "topic"))
    assert refused.value.field == "messages.9.value"
    assert str(refused.value) == ("messages.9.value is 11 bytes, over the limit of topic 't' partition 3: "
                                  "max.message.bytes of 10 (the topic's)")
