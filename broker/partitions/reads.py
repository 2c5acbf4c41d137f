"""Reads of Kafka records: a partition from an offset, one message by id, and the index catch-up range."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from broker.errors import InvalidField
from broker.partitions.client_messages import OutMessage
from broker.partitions.damage import BatchTaker, served_lists_before_damage
from broker.partitions.index_time import entry_time, timed_batch_lists
from broker.partitions.kafka_clients import txn_partition
from broker.partitions.message_id import decode_message_id, encode_message_id
from broker.partitions.partition import Partition
from broker.partitions.partition_map import PartitionMap, now_ms
from broker.partitions.records import (
    LOG_APPEND_TIME,
    BatchHeader,
    Record,
    decode_records,
    index_keys,
    record_size,
    walk_records,
)
from broker.partitions.topic_errors import TopicNotFound
from broker.partitions.topics import TopicInfo
from index_file import IndexEntry

CATCH_UP_BATCH = 4096

try:
    from broker.partitions import _record_entries
except ImportError:  # not built: the records are decoded in Python (tests/broker checks CI builds it)
    _record_entries = None


def out_message(topic: str, topic_id: int, partition: int, r: Record) -> OutMessage:
    return OutMessage(topic, partition, r.offset, encode_message_id(topic_id, partition, r.offset), r.key, r.value,
                      r.headers or [], r.timestamp_ms)


def out_messages(topic: str, topic_id: int, partition: int, records: list[Record]) -> list[OutMessage]:
    """`out_message` of each record, the id prefix (topic id, partition) encoded once for the page."""
    if not records:
        return []
    prefix = encode_message_id(topic_id, partition, 0)[:16]
    new = tuple.__new__  # a named tuple's own __new__ is a Python function: one frame per record saved
    return [new(OutMessage, (topic, partition, off, f"{prefix}{off:016x}", key, value, headers or [], ts))
            for off, ts, key, value, headers in records]


class Rendered(NamedTuple):
    """What a page renderer made of one stored batch: how many messages, the last one's offset, and where its
    output of them ends (so a page cut before damage keeps exactly the output of the batches served)."""

    count: int
    last_offset: int
    end: int


#: (topic, topic id, partition, start, end) -> what renders each batch's messages of [start, end)
Renderer = Callable[[str, int, int, int, int], BatchTaker[Rendered]]


def _page(parts: PartitionMap, topic: str, partition: int, offset: int, max_count: int
          ) -> tuple[TopicInfo, Partition, int, int, int]:
    """(topic, partition, first offset, end of the page, end of the partition) of a page read, checked."""
    info = parts.topic(topic)
    p = parts.partition(info, partition)
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidField("offset", f"must be a non-negative integer, got {offset!r}")
    if isinstance(max_count, bool) or not isinstance(max_count, int) or max_count < 1:
        raise InvalidField("max", f"must be a positive integer, got {max_count!r}")
    start, end = parts.bounds(p)
    if not p.owned and offset >= end:  # the fresh tail lives on the leader: another node (retry there), or this
        raise parts.not_served(p)  # one once it serves it (a move's target, a failover): retry, not an empty page
    pos = max(offset, start)
    return info, p, pos, min(end, pos + max_count), end


def fetch(parts: PartitionMap, topic: str, partition: int, offset: int, max_count: int
          ) -> tuple[list[OutMessage], int]:
    """Up to `max_count` messages from `offset` on, and the offset to continue from."""
    info, p, pos, stop, end = _page(parts, topic, partition, offset, max_count)
    out: list[OutMessage] = []
    if pos < end:
        out = out_messages(info.name, info.topic_id, p.index, served_lists_before_damage(parts.record_lists(p, pos,
                                                                                                             stop)))
    # a page of markers only (control batches hold no message) moves on past them
    next_offset = out[-1].offset + 1 if out else (stop if pos < end else (pos if offset < end else offset))
    return out, next_offset


def fetch_rendered(parts: PartitionMap, topic: str, partition: int, offset: int, max_count: int,
                   renderer: Renderer) -> tuple[list[Rendered], int]:
    """`fetch` with each stored batch's messages rendered by `renderer` (the HTTP layer's JSON) instead of
    decoded into messages: the same messages, the same offset to continue from, the same damage rule."""
    info, p, pos, stop, end = _page(parts, topic, partition, offset, max_count)
    out: list[Rendered] = []
    if pos < end:
        take = renderer(info.name, info.topic_id, p.index, pos, stop)
        out = [r for r in served_lists_before_damage(parts.batch_lists(p, pos, stop, take)) if r.count]
    next_offset = out[-1].last_offset + 1 if out else (stop if pos < end else (pos if offset < end else offset))
    return out, next_offset


def message_at(parts: PartitionMap, info: TopicInfo, partition: int, offset: int) -> OutMessage | None:
    if not 0 <= partition < info.partitions:
        return None
    try:
        p = parts.get(info.name, partition)
    except TopicNotFound:
        return None  # deleted meanwhile
    if p.topic.topic_id != info.topic_id:
        return None  # deleted and created again meanwhile: never another topic's record
    start, end = parts.bounds(p)
    if not p.owned and offset >= end and parts.remote_message is not None:
        return parts.remote_message(info.name, partition, offset)  # acknowledged on the leader, not uploaded
    if not start <= offset < end:
        return None
    for r in parts.records(p, offset, offset + 1):
        if r.offset == offset:
            if not txn_partition.visible(parts, p, offset):
                return None  # a record of an aborted or still open transaction is never shown
            return out_message(info.name, info.topic_id, partition, r)
    return None


def get_by_id(parts: PartitionMap, msg_id: str) -> OutMessage | None:
    """The message a 32-hex id names (topic id, partition, offset): no index is read."""
    mid = decode_message_id(msg_id)
    name = parts.name_of(mid.topic_id)
    if name is None:
        return None
    try:
        info = parts.topic(name)
    except TopicNotFound:
        return None
    if info.topic_id != mid.topic_id:
        return None
    return message_at(parts, info, mid.partition, mid.offset)


def index_entries(parts: PartitionMap, topic: str, partition: int, start: int, end: int,
                  clock: Callable[[], int] = now_ms) -> Iterator[list[IndexEntry]]:
    """Index entries of [start, end) of one partition, read back from the stream (re-dispatch, rescue), in lists
    of CATCH_UP_BATCH, each at the append time stored with its record, as the live dispatch indexed it
    (broker/partitions/index_time.py; a record stored without one: its timestamp, never later than now)."""
    p = parts.get(topic, partition)
    if _record_entries is None:
        yield from _chunks(_decoded_entries(parts, p, topic, partition, start, end, clock))
        return

    def take(h: BatchHeader, raw: bytes, pos: int, append_ms: int | None) -> list[IndexEntry]:
        # the entries read in C from the batch's record bytes (as the dispatcher reads a produced batch); a
        # stored append time read as a LogAppendTime batch's, so every record takes it; a transaction marker
        # (control batch) is never indexed
        if h.is_control:
            return []
        if append_ms is not None:
            return walk_records(_record_entries.catch_up_entries, raw, h, pos, topic, partition,  # type: ignore[no-any-return]
                                h.base_offset, append_ms, append_ms, True, start, end, append_ms)
        return walk_records(_record_entries.catch_up_entries, raw, h, pos, topic, partition,  # type: ignore[no-any-return]
                            h.base_offset, h.first_timestamp, h.max_timestamp, bool(h.attributes & LOG_APPEND_TIME),
                            start, end, clock())

    yield from _chunks(e for entries in timed_batch_lists(parts, p, start, end, take) for e in entries)


def _decoded_entries(parts: PartitionMap, p: Partition, topic: str, partition: int, start: int, end: int,
                     clock: Callable[[], int]) -> Iterator[IndexEntry]:
    """`index_entries` from the records decoded in Python (where the C reader is not built)."""

    def take(h: BatchHeader, raw: bytes, pos: int, append_ms: int | None) -> list[IndexEntry]:
        if h.is_control:
            return []
        return [IndexEntry(topic, partition, r.offset, record_size(r), entry_time(append_ms, r.timestamp_ms, clock),
                           keys)
                for r in decode_records(raw, h, pos, check_crc=False)
                if start <= r.offset < end and (keys := index_keys(r))]

    for entries in timed_batch_lists(parts, p, start, end, take):
        yield from entries


def _chunks(entries: Iterable[IndexEntry]) -> Iterator[list[IndexEntry]]:
    batch: list[IndexEntry] = []
    for e in entries:
        batch.append(e)
        if len(batch) >= CATCH_UP_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch
