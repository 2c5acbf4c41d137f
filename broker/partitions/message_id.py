"""Message ids: 32 hex characters = topic id (4 bytes) + partition (4) + offset (8), big-endian.

A lookup by id needs no index: the id names the partition and offset of the message.
"""

from __future__ import annotations

import re
import struct
from typing import NamedTuple

from broker.errors import MessageIdError

_LAYOUT = struct.Struct(">IIQ")
_HEX32 = re.compile(r"[0-9a-fA-F]{32}")


class MessageId(NamedTuple):
    topic_id: int
    partition: int
    offset: int

    def __str__(self) -> str:
        return encode_message_id(self.topic_id, self.partition, self.offset)


def encode_message_id(topic_id: int, partition: int, offset: int) -> str:
    """Lowercase 32-hex id; topic id and partition are unsigned 32-bit, offset a non-negative 63-bit int."""
    for name, value, limit in (("topic id", topic_id, 1 << 32), ("partition", partition, 1 << 32),
                               ("offset", offset, 1 << 63)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < limit:
            raise MessageIdError(f"message id: {name} {value!r} is not an integer in [0, {limit})")
    return _LAYOUT.pack(topic_id, partition, offset).hex()


def decode_message_id(msg_id: str) -> MessageId:
    """Parse an id (either case); a wrong length, non-hex character or out-of-range offset is a MessageIdError."""
    if not isinstance(msg_id, str):
        raise MessageIdError(f"message id must be a string, got {type(msg_id).__name__}")
    if len(msg_id) != 32:
        raise MessageIdError(f"message id {msg_id[:40]!r} must be 32 hex characters, got {len(msg_id)}")
    if not _HEX32.fullmatch(msg_id):
        raise MessageIdError(f"message id {msg_id!r} has non-hex characters")
    topic_id, partition, offset = _LAYOUT.unpack(bytes.fromhex(msg_id))
    if offset >= 1 << 63:
        raise MessageIdError(f"message id {msg_id!r}: offset {offset} is beyond the largest Kafka offset")
    return MessageId(topic_id, partition, offset)
