"""`mqindex inspect-object KEY_OR_PATH [--store URL] [--records]`: dump an S3Stream object.

Prints the footer (index position and length), one line per index entry and, with --records, every
stream record of every block and what its payload is: a partition's data stream holds Kafka RecordBatch v2
bytes (whatever produced them: the HTTP API and Kafka clients alike), printed with their header fields; its
meta stream holds partition state records (one JSON snapshot each), printed with their fields. Anything
else is said to be neither. Without --store the argument is a local file path, read in place.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from api.cli import stores
from api.cli.client import iso_time
from broker.errors import ObjectFormatError, RecordFormatError
from broker.objects.reader import ObjectReader
from broker.partitions.partition_state import PartitionState
from broker.partitions.records import parse_batches


class _LocalFile:
    """A read-only ranged view of one local file, shaped like the BlobStore calls the reader makes."""

    def __init__(self, path: str) -> None:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no such object file {path!r} (give --store URL to read a key from a store)")
        self.path = path

    def size(self, key: str) -> int:
        return os.path.getsize(self.path)

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        with open(self.path, "rb") as f:
            f.seek(start)
            return f.read(-1 if end is None else max(0, end - start))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("object", metavar="KEY_OR_PATH", help="object key in --store, or a local file path")
    parser.add_argument("--store", metavar="URL", help="store URL (file://, s3://, sqlite://, postgresql://)")
    parser.add_argument("--records", action="store_true",
                        help="also dump each stream record: its Kafka batches or partition state")


def dump(reader: ObjectReader, records: bool, out: Callable[[str], None]) -> None:
    f = reader.footer
    out(f"object {reader.key}: {reader.size} bytes, {len(reader.index)} data blocks")
    out(f"indexStartPosition={f.index_position} indexBlockLength={f.index_length}")
    for e in reader.index:
        out(f"streamId={e.stream_id} startOffset={e.start_offset} endOffset={e.end_offset} "
            f"recordCount={e.record_count} startPosition={e.position} size={e.size}")
    if not records:
        return
    for e, recs in reader.iter_all():
        out(f"=== block at {e.position}: streamId={e.stream_id} [{e.start_offset}, {e.end_offset})")
        for r in recs:
            out(f"StreamRecordBatch{{streamId={r.stream_id}, epoch={r.epoch}, baseOffset={r.base_offset}, "
                f"count={r.count}, size={len(r.payload)}}}")
            try:
                batches = list(parse_batches(r.payload))
            except RecordFormatError as exc:
                out(_not_kafka(r.payload, exc))
                continue
            for b in batches:
                h = b.header
                out(f"  batch baseOffset={h.base_offset} lastOffset={h.next_offset - 1} count={h.records_count} "
                    f"sizeInBytes={h.size} magic={h.magic} crc={h.crc} compression={h.compression} "
                    f"timestampType={h.timestamp_type} firstTimestamp={h.first_timestamp} "
                    f"maxTimestamp={h.max_timestamp} producerId={h.producer_id} producerEpoch={h.producer_epoch} "
                    f"baseSequence={h.base_sequence} partitionLeaderEpoch={h.partition_leader_epoch} "
                    f"transactional={h.is_transactional} control={h.is_control}")


def _not_kafka(payload: bytes, exc: RecordFormatError) -> str:
    """What a payload that is no valid Kafka batch is: a partition state record, a damaged batch, or neither."""
    if len(payload) > 16 and payload[16] == 2:  # magic 2: a Kafka batch that fails its checks
        return f"  payload: {len(payload)} bytes, a DAMAGED Kafka RecordBatch v2 ({exc})"
    try:
        st = PartitionState.decode(payload)
    except ValueError:
        return f"  payload: {len(payload)} bytes, not a Kafka RecordBatch v2 nor a partition state record ({exc})"
    return (f"  payload: {len(payload)} bytes, a partition state record (meta stream): start_offset={st.start_offset} "
            f"clean_shutdown={st.clean_shutdown} index_checkpoint={st.index_checkpoint} node_id={st.node_id} "
            f"epoch={st.epoch} at={iso_time(st.at_ms)}")


def _reader(source: Any, key: str) -> ObjectReader:
    """The object's reader; an index file given by mistake is named as one, with the command that reads it."""
    try:
        return ObjectReader(source, key)
    except ObjectFormatError as exc:
        from index_file.detect import detect_format
        from index_file.errors import FormatError

        try:
            fmt = detect_format(key, source.get(key, 0, 4))
        except FormatError:
            raise exc from None
        raise ObjectFormatError(key, "not a stream object", f"it is an index file ({fmt.value}): read it with "
                                                             f"mqindex inspect-index") from None


def run(args: argparse.Namespace) -> int:
    if args.store:
        store = stores.open_existing(args.store, "--store")
        try:
            dump(_reader(store, args.object), args.records, print)
        finally:
            store.close()
    else:
        dump(_reader(_LocalFile(args.object), args.object), args.records, print)
    return 0
