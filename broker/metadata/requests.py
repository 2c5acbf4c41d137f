"""The requests and answers of the metadata client as plain data: object commits (stream set objects, stream
objects, compaction's outputs), the cleanup of destroyed objects and a snapshot pass."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CommitRange:
    """[start, end) of a stream, uploaded at stream epoch `epoch`."""

    stream_id: int
    epoch: int
    start: int
    end: int


@dataclass(frozen=True)
class StreamSetObjectCommit:
    object_id: int
    size: int
    ranges: Sequence[CommitRange]


@dataclass(frozen=True)
class StreamObjectCommit:
    object_id: int
    size: int
    range: CommitRange


@dataclass(frozen=True)
class CompactedStreamObject:
    """A stream object written by compaction: [start, end) of one stream."""

    object_id: int
    stream_id: int
    start: int
    end: int
    size: int


@dataclass(frozen=True)
class CompactedStreamSetObject:
    """A stream set object written by compaction: one [start, end) per stream."""

    object_id: int
    size: int
    ranges: dict[int, tuple[int, int]]


@dataclass
class CleanupResult:
    expired: list[int] = field(default_factory=list)  # prepared objects past expiry, marked destroyed
    deleted: list[int] = field(default_factory=list)  # objects removed from the store and the metadata


@dataclass(frozen=True)
class SnapshotResult:
    log_offset: int  # the image offset the snapshot holds
    payload_bytes: int
    written: bool  # False: a snapshot at that offset was there already
    snapshots_deleted: int
    records_truncated: int  # log records deleted below the oldest kept snapshot
