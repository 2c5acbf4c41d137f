"""The store time an index entry carries: decided once, when the broker appends the record, and stored with it.

Every index entry of a record carries the broker's append time (the produce path's and a Kafka client batch's
`clock()` when its batch is queued on the WAL), never the record's own timestamp (the producer's CreateTime,
maybe skewed or a backfill). The append time is stored in the header of the record's stream record (WAL body
and object data block: `TIMED_RECORD_MAGIC`, docs/FORMAT.md), so the live dispatch, a re-dispatch after a
crash or a failover, the rescue of a dead node's entries and a Spark build all index the record at the same
time, and a begin/end lookup answers the same messages, in the same pages, whichever of them indexed it.

A stream record written before the append time was stored has none: its records fall back to the rule of that
time, the record's timestamp (never later than now for a re-dispatch or a rescue).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

from broker.errors import OffsetOutOfRange
from broker.partitions.damage import batch_lists
from broker.partitions.partition import Partition
from broker.partitions.partition_map import PartitionMap
from broker.partitions.records import BatchHeader

T = TypeVar("T")

#: what a reader makes of one CRC-checked batch: (header, batch bytes, byte position, the append time stored
#: with the stream record holding it, or None)
TimedBatchTaker = Callable[[BatchHeader, bytes, int, "int | None"], list[T]]


def entry_time(append_ms: int | None, record_ms: int, now: Callable[[], int]) -> int:
    """The store time of an entry read back from the stream: the stored append time, else (a record written
    before it was stored) the record's timestamp, never later than now."""
    return append_ms if append_ms is not None else min(record_ms, now())


def timed_batch_lists(parts: PartitionMap, p: Partition, start: int, end: int, take: TimedBatchTaker[T]
                      ) -> Iterator[list[T]]:
    """`PartitionMap.batch_lists` whose `take` is also given the append time stored with each batch's stream
    record."""
    stamp: list[int | None] = [None]

    def records() -> Iterator:  # type: ignore[type-arg]
        for sr in parts.storage.read(p.data_stream, start, end):
            stamp[0] = sr.append_ms  # batch_lists takes this stream record's batches before asking the next
            yield sr

    try:
        yield from batch_lists(parts.storage.reader, p.data_stream, records(), start, end,
                               lambda h, raw, pos: take(h, raw, pos, stamp[0]))
    except OffsetOutOfRange:
        return  # trimmed by retention meanwhile
