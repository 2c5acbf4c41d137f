"""Errors about topics and partitions that clients see (the HTTP layer maps them to 404/409/400)."""

from __future__ import annotations

from broker.errors import BrokerError, InvalidRequest


class TopicNotFound(BrokerError, KeyError):
    def __init__(self, topic: str) -> None:
        super().__init__(f"topic {topic!r} does not exist")
        self.topic = topic
        self.field = "topic"

    def __str__(self) -> str:
        return str(self.args[0])


class TopicExists(BrokerError):
    def __init__(self, topic: str) -> None:
        super().__init__(f"topic {topic!r} already exists")
        self.field = "name"


class InvalidTopicName(InvalidRequest):
    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"topic name {name!r} {why}")
        self.field = "name"


class PartitionNotFound(BrokerError, KeyError):
    def __init__(self, topic: str, partition: int, partitions: int, field: str = "partition") -> None:
        super().__init__(f"topic {topic!r} has partitions 0..{partitions - 1}, not {partition}")
        self.field = field  # the request's field at fault (a produce request's messages.N.partition)

    def __str__(self) -> str:
        return str(self.args[0])
