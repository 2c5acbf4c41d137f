"""The messages a client produces and reads, as the broker node takes and returns them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class InMessage:
    """One message to produce. partition None: chosen by the key's hash, or round robin without a key.
    timestamp: the producer's own time (ms), stored in the record and returned with it; None = the
    broker's append time. The index always uses the append time."""

    value: bytes | None
    key: bytes | None = None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    partition: int | None = None
    timestamp: int | None = None


@dataclass(frozen=True)
class Produced:
    """Where an acknowledged message was stored (returned only after the WAL is on disk)."""

    partition: int
    offset: int
    msg_id: str
    timestamp: int  # the record's timestamp: the producer's, else the append time


@dataclass(frozen=True)
class OutMessage:
    """A stored message, whole."""

    topic: str
    partition: int
    offset: int
    msg_id: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    timestamp: int = 0
