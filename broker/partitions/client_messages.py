"""The messages a client produces and reads, as the broker node takes and returns them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class InMessage(NamedTuple):
    """One message to produce. partition None: chosen by the key's hash, or round robin without a key.
    timestamp: the producer's own time (ms), stored in the record and returned with it; None = the
    broker's append time. The index always uses the append time. A named tuple: a produce request makes one
    per message, and a tuple costs a fraction of a frozen dataclass's per-field `object.__setattr__`."""

    value: bytes | None
    key: bytes | None = None
    headers: Sequence[tuple[str, bytes | None]] = ()  # a value None: a null header value
    partition: int | None = None
    timestamp: int | None = None


class Produced(NamedTuple):
    """Where an acknowledged message was stored (returned only after the WAL is on disk); a named tuple as
    InMessage."""

    partition: int
    offset: int
    msg_id: str
    timestamp: int  # the record's timestamp: the producer's, else the append time


class OutMessage(NamedTuple):
    """A stored message, whole. A named tuple: a whole-record read makes one per record, and a tuple costs a
    fraction of a frozen dataclass's per-field `object.__setattr__`."""

    topic: str
    partition: int
    offset: int
    msg_id: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]  # in record order, a name may repeat; None: a null value
    timestamp: int = 0
