"""What an operator asks of a consumer group's committed offsets: lag, resets, deletion.

Committed offsets live in the metadata KV (group_offsets.py). The figures here come from memory: the committed
offsets from the caught-up metadata image, the end offsets from the partitions (a led partition's acknowledged
end; another node's partition: the end committed to the metadata, which trails by up to an upload interval).
Only the lag in time reads a record: the one at the committed offset, once per partition asked.

Resets follow kafka-consumer-groups: --to-earliest, --to-latest, --to-datetime, --to-offset and --shift-by,
each clamped into the partition's [start, end] (an offset before the start goes to the start, past the end to
the end).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from broker.metadata import MetadataClient
from broker.partitions.kafka_clients import group_offsets
from broker.partitions.kafka_clients.client_reads import offset_for_time
from broker.partitions.partition_map import PartitionMap
from broker.partitions.topic_errors import PartitionNotFound, TopicNotFound

RESETS = ("earliest", "latest", "datetime", "offset", "shift")


@dataclass(frozen=True)
class ResetSpec:
    """A reset: `to` one of RESETS; `value` the time (ms) for datetime, the offset, or the shift (+/-)."""
    to: str
    value: int = 0

    def __post_init__(self) -> None:
        if self.to not in RESETS:
            raise ValueError(f"to must be one of {', '.join(RESETS)} (got {self.to!r})")
        if self.to == "offset" and self.value < 0:
            raise ValueError(f"offset must be at least 0 (got {self.value})")
        if self.to == "datetime" and self.value < 0:
            raise ValueError(f"the time must be at or after the epoch (got {self.value} ms)")


def group_ids(meta: MetadataClient, refresh: bool = True) -> set[str]:
    """Every group that has a committed offset (topic names hold no "/", group ids may)."""
    out = set()
    for k in meta.kv_items(group_offsets.PREFIX, refresh=refresh):
        parts = k[len(group_offsets.PREFIX):].rsplit("/", 2)
        if len(parts) == 3:
            out.add(parts[0])
    return out


def end_offsets(parts: PartitionMap, topic: str) -> list[tuple[int, int]] | None:
    """[(start, end)] of each partition of `topic`, from memory; None when the topic does not exist."""
    try:
        info = parts.topic(topic)
    except TopicNotFound:
        return None
    return [parts.bounds(parts.partition(info, i)) for i in range(info.partitions)]


def oldest_unconsumed_ms(parts: PartitionMap, topic: str, partition: int, offset: int) -> int | None:
    """The store time of the record at `offset` (the oldest one the group has not consumed), or None."""
    try:
        p = parts.get(topic, partition)
        for r in parts.records(p, offset, offset + 1):
            return int(r.timestamp_ms)
    except (LookupError, ValueError, OSError):
        return None
    return None


RECORD_SPAN = 256  # offsets of one partition whose record times are read in one pass


def record_times(parts: PartitionMap, topic: str, partition: int, offsets: list[int]) -> dict[int, int]:
    """The store times of the records at `offsets` (sorted) of one partition, as `oldest_unconsumed_ms` gives
    them one at a time: offsets within RECORD_SPAN of each other are read in one pass (many groups committed at
    nearby offsets: one decode of their batches instead of one each). Offsets without a record are left out."""
    try:
        p = parts.get(topic, partition)
    except LookupError:
        return {}
    want, out = set(offsets), {}
    i = 0
    while i < len(offsets):
        j = i
        while j + 1 < len(offsets) and offsets[j + 1] - offsets[i] < RECORD_SPAN:
            j += 1
        try:
            for r in parts.records(p, offsets[i], offsets[j] + 1):
                if r.offset in want:
                    out[r.offset] = int(r.timestamp_ms)
        except (LookupError, ValueError, OSError):
            pass
        i = j + 1
    return out


def partition_lag(parts: PartitionMap, committed: dict[tuple[str, int], tuple[int, str]],
                  assigned: set[tuple[str, int]] = frozenset(), with_time: bool = True) -> list[dict[str, Any]]:
    """One row per partition committed or `assigned`: committed offset (None: none), start and end offsets, lag
    in messages (from the start when nothing is committed, as Kafka's tools count it: null then) and, with
    `with_time`, `lag_ms`: how old the oldest unconsumed message is (0 when caught up)."""
    now = int(time.time() * 1000)
    ends: dict[str, list[tuple[int, int]] | None] = {}
    rows = []
    for topic, partition in sorted(set(committed) | set(assigned)):
        if topic not in ends:
            ends[topic] = end_offsets(parts, topic)
        bounds = ends[topic]
        off = committed[(topic, partition)][0] if (topic, partition) in committed else None
        row: dict[str, Any] = dict(topic=topic, partition=partition, committed_offset=off, start_offset=None,
                                   end_offset=None, lag=None, lag_ms=None)
        if bounds is not None and partition < len(bounds):
            start, end = bounds[partition]
            row.update(start_offset=start, end_offset=end)
            if off is not None:
                row["lag"] = max(end - max(off, start), 0)
                if with_time:
                    ts = oldest_unconsumed_ms(parts, topic, partition, max(off, start)) if row["lag"] else None
                    row["lag_ms"] = max(now - ts, 0) if ts is not None else 0
        rows.append(row)
    return rows


@dataclass(frozen=True)
class LeaderFigures:
    """A partition's [start, end) as its leader (another node) sees them, and with a datetime reset the first
    offset at or after that time there (None: every message is older)."""
    start: int
    end: int
    at_time: int | None = None


def plan_reset(parts: PartitionMap, committed: dict[tuple[str, int], tuple[int, str]],
               targets: list[tuple[str, int]], spec: ResetSpec,
               leaders: dict[tuple[str, int], LeaderFigures] | None = None) -> list[dict[str, Any]]:
    """The new offset of each (topic, partition) of `targets`: [{topic, partition, current_offset, new_offset}].
    A partition in `leaders` (led by another node) uses its leader's figures: this node's end trails the leader's
    by up to an upload interval, and a reset clamped to it would move a group back. An unknown topic or
    partition is a TopicNotFound / PartitionNotFound; nothing is stored here."""
    out = []
    for topic, partition in targets:
        info = parts.topic(topic)
        p = parts.partition(info, partition)
        there = (leaders or {}).get((topic, partition))
        start, end = (there.start, there.end) if there is not None else parts.bounds(p)
        current = committed.get((topic, partition), (None, ""))[0]
        if spec.to == "earliest":
            new = start
        elif spec.to == "latest":
            new = end
        elif spec.to == "datetime":
            if there is not None:
                new = end if there.at_time is None else there.at_time
            else:
                new = offset_for_time(parts, p, spec.value)[0]
                new = end if new < 0 else new
        elif spec.to == "offset":
            new = spec.value
        else:  # shift: from the committed offset (from the start when none is committed)
            new = (current if current is not None else start) + spec.value
        out.append(dict(topic=topic, partition=partition, current_offset=current,
                        new_offset=min(max(new, start), end)))
    return out


def targets_of(parts: PartitionMap, committed: dict[tuple[str, int], tuple[int, str]],
               topics: list[str]) -> list[tuple[str, int]]:
    """The partitions a reset applies to: every partition of each topic given (`topic` or `topic:0,2`), else
    every partition the group has committed."""
    if not topics:
        return sorted(committed)
    out: list[tuple[str, int]] = []
    for spec in topics:
        name, _, which = spec.partition(":")
        info = parts.topic(name)
        if which:
            try:
                indexes = [int(x) for x in which.split(",")]
            except ValueError:
                raise ValueError(f"topic {spec!r}: partitions must be integers, as in {name}:0,2") from None
            for i in indexes:
                if not 0 <= i < info.partitions:
                    raise PartitionNotFound(name, i, info.partitions, field="topic")
        else:
            indexes = list(range(info.partitions))
        out += [(name, i) for i in indexes]
    return sorted(set(out))


def store_offsets(meta: MetadataClient, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit the offsets (the metadata text of each is kept empty)."""
    if offsets:
        group_offsets.commit(meta, group, {k: (v, "") for k, v in offsets.items()})


def delete_offsets(meta: MetadataClient, group: str, which: list[tuple[str, int]] | None = None) -> int:
    """Delete the group's committed offsets (all of them, or those of `which`); returns how many were."""
    have = group_offsets.fetch(meta, group)
    keys = [group_offsets.PREFIX + f"{group}/{t}/{p}" for (t, p) in (have if which is None else which)
            if (t, p) in have]
    for k in keys:
        meta.kv_delete(k)
    return len(keys)
