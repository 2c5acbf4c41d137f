"""Damage on the partition read path: Kafka records parsed out of stream records, a batch that
fails its checks turned into store damage naming the object, and a fetch that serves what precedes damage.

A record batch read back from the store whose CRC no longer matches is damage in the store, never the
client's doing: it surfaces as `ObjectFormatError(object key, "record batch crc")` (the HTTP layer answers
it with a 5xx naming the object), not as the `RecordFormatError` (a ValueError, so a 400) the parser raises
for bytes a client sent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from broker.errors import ObjectFormatError, RecordFormatError
from broker.objects.format import StreamRecord
from broker.partitions.records import BatchHeader, Record, batch_slices, decode_records, verify_crc
from broker.streams.stream_reader import StreamReader

log = logging.getLogger("mqindex.broker.reads")

T = TypeVar("T")


def damaged_batch(reader: StreamReader, stream_id: int, rec: StreamRecord, exc: RecordFormatError) -> ObjectFormatError:
    """The store damage a batch that fails to parse stands for, naming the object that holds it."""
    key = reader.object_at(stream_id, rec.base_offset)
    if key is None:  # not in a committed object (log cache): still not the client's doing
        key = f"stream {stream_id} cache"
    check = "record batch crc" if "CRC mismatch" in str(exc) else "record batch"
    return ObjectFormatError(key, check, f"stream {stream_id} offsets [{rec.base_offset}, {rec.last_offset}): {exc}")


#: what a reader makes of one CRC-checked batch with records in the range read: (header, batch bytes, byte position)
BatchTaker = Callable[[BatchHeader, bytes, int], list[T]]


def batch_lists(reader: StreamReader, stream_id: int, stream_records: Iterable[StreamRecord], start: int, end: int,
                take: BatchTaker[T]) -> Iterator[list[T]]:
    """What `take` makes of each batch holding records of [start, end), one list per stream record. Each of
    those batches is CRC-checked first; one that fails, or that `take` cannot decode (RecordFormatError), is
    store damage naming the object that holds it."""
    for sr in stream_records:
        out: list[T] = []
        try:
            for pos, h, raw in batch_slices(sr.payload):
                if h.next_offset <= start or h.base_offset >= end or h.is_control:
                    continue  # (a transaction's marker holds no message)
                verify_crc(raw, h, pos)
                out.extend(take(h, raw, pos))
        except RecordFormatError as exc:
            raise damaged_batch(reader, stream_id, sr, exc) from exc
        yield out


def parsed_record_lists(reader: StreamReader, stream_id: int, stream_records: Iterable[StreamRecord],
                        start: int, end: int) -> Iterator[list[Record]]:
    """The Kafka records of [start, end) held by these stream records, one list per stream record, each batch
    CRC-checked (lists, not single records: a whole-record page is built with list operations)."""

    def take(h: BatchHeader, raw: bytes, pos: int) -> list[Record]:
        records = decode_records(raw, h, pos, check_crc=False)
        if start <= h.base_offset and h.next_offset <= end:
            return records  # the whole batch is wanted: no per-record test
        return [r for r in records if start <= r.offset < end]

    return batch_lists(reader, stream_id, stream_records, start, end, take)


def parsed_records(reader: StreamReader, stream_id: int, stream_records: Iterable[StreamRecord],
                   start: int, end: int) -> Iterator[Record]:
    """The Kafka records of [start, end) held by these stream records, each batch CRC-checked."""
    for records in parsed_record_lists(reader, stream_id, stream_records, start, end):
        yield from records


def served_lists_before_damage(lists: Iterator[list[T]]) -> list[T]:
    """Everything `lists` yields, concatenated, up to the first damaged object. With something already read,
    those are the answer (the next read starts inside the damaged object and gets the error); with nothing
    read, the damage is raised."""
    out: list[T] = []
    try:
        for items in lists:
            out.extend(items)
    except ObjectFormatError as exc:
        if not out:
            raise
        log.debug("read stops before a damaged object", extra={"object": exc.key, "check": exc.check})
    return out
