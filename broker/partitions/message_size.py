"""max.message.bytes on produce: the largest record batch each topic takes, looked up on every produce.

As in Kafka, a record batch a Kafka client sends is refused (MESSAGE_TOO_LARGE, nothing of that partition's
part of the request stored, the request's other partitions served) when its size as sent is over the topic's
`max.message.bytes`, else the node's `message_max_bytes` (Kafka's broker config `message.max.bytes`, 1,048,588 by
default). The size is Kafka's: the whole batch as the client sent it, compressed if it was, with the 12 bytes of
log overhead (base offset and length) that Kafka counts in a batch (broker/partitions/kafka_clients/
client_batches.py checks it). The WAL's own bound on a record (16 MiB by default) applies as well, whatever
the config says.

HTTP produce (broker/partitions/produce.py) holds each message's value to the same limit instead: its batches
are the broker's own (one a partition a request, bounded by the WAL record), not a client's, and HTTP has its own
limit of 1 MiB a value (api/http), which Kafka's default of 1 MiB + 12 bytes a batch would cut below once the
record's framing is counted. A topic that lowers `max.message.bytes` bounds the values HTTP takes with it.

`TopicLimits.of(topic)` reads the node's metadata image without a catch-up: a change made on another node counts
here from this node's next catch-up (every 0.1 s), a change made here from the next produce. The decoded limit is
kept while the topic's stored configs stay the same string.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from broker.errors import InvalidField
from broker.metadata import MetadataClient
from broker.partitions import topic_config
from broker.partitions.client_messages import InMessage

log = logging.getLogger("mqindex.broker.message_size")


class MessageTooLarge(InvalidField):
    """An HTTP message whose value is over its topic's max.message.bytes (HTTP answers 413); nothing of the
    request is stored."""


@dataclass(frozen=True, slots=True)
class Limit:
    """A topic's largest record batch, in bytes, and where it comes from: "topic" (its max.message.bytes) or
    "server" (the node's message_max_bytes)."""

    bytes: int
    source: str

    def named(self) -> str:
        """The limit as a refusal names it, with where it comes from."""
        if self.source == "topic":
            return f"max.message.bytes of {self.bytes} (the topic's)"
        return (f"max.message.bytes of {self.bytes} (the server's message_max_bytes, the topic setting none; "
                "set max.message.bytes on the topic to take more)")

    def batch_refusal(self, topic: str, partition: int, size: int) -> str:
        """Why a record batch of `size` bytes (as Kafka counts them) is refused, as the producer is told it."""
        return f"the record batch of {size} bytes for topic {topic!r} partition {partition} is over its " \
               f"{self.named()}"


class TopicLimits:
    """The limit of each topic, from the metadata image; `server` for a topic that sets none."""

    def __init__(self, meta: MetadataClient, message_max_bytes: int = topic_config.DEFAULT_MAX_MESSAGE_BYTES
                 ) -> None:
        self.meta = meta
        self.server = Limit(message_max_bytes, "server")
        self._seen: dict[str, tuple[str, Limit]] = {}  # topic -> (its stored configs, the limit they give)

    def of(self, topic: str) -> Limit:
        raw = self.meta.kv_get(topic_config.kv_key(topic), refresh=False)
        if raw is None:
            if self._seen:
                self._seen.pop(topic, None)
            return self.server
        hit = self._seen.get(topic)
        if hit is not None and hit[0] == raw:
            return hit[1]
        try:
            own = topic_config.decode(topic, raw)
        except RuntimeError as exc:  # damaged: produce goes on at the server's limit, the damage is said once
            log.error("topic configs unreadable; produce takes the server's message_max_bytes",
                      extra={"topic": topic, "error": str(exc)})
            own = {}
        value = own.get(topic_config.MAX_MESSAGE_BYTES)
        limit = self.server if value is None else Limit(value, "topic")
        self._seen[topic] = (raw, limit)
        return limit


def check_values(topic: str, partition: int, messages: Sequence[InMessage], positions: Sequence[int],
                 limit: Limit) -> None:
    """HTTP produce: MessageTooLarge for the first message whose value is over the limit (`positions`: each
    message's place in the request, which the error names)."""
    for m, i in zip(messages, positions, strict=True):
        if m.value is not None and len(m.value) > limit.bytes:
            raise MessageTooLarge(f"messages.{i}.value", f"is {len(m.value)} bytes, over the limit of topic "
                                                         f"{topic!r} partition {partition}: {limit.named()}")
