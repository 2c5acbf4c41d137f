"""`mqindex inspect-object KEY_OR_PATH [--store URL] [--records]`: dump an S3Stream object.

Prints the footer (index position and length), one line per index entry and, with --records, every
stream record of every block with the Kafka RecordBatch header fields of its payload. Without --store
the argument is a local file path, read in place.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from broker.errors import RecordFormatError
from broker.objects.reader import ObjectReader
from broker.partitions.records import parse_batches
from storage_tier import open_store


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
    parser.add_argument("--records", action="store_true", help="also dump each stream record and Kafka batch")


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
                out(f"  payload: {len(r.payload)} bytes, not a Kafka RecordBatch v2 ({exc})")
                continue
            for b in batches:
                h = b.header
                out(f"  batch baseOffset={h.base_offset} lastOffset={h.next_offset - 1} count={h.records_count} "
                    f"sizeInBytes={h.size} magic={h.magic} crc={h.crc} compression={h.compression} "
                    f"timestampType={h.timestamp_type} firstTimestamp={h.first_timestamp} "
                    f"maxTimestamp={h.max_timestamp} producerId={h.producer_id} producerEpoch={h.producer_epoch} "
                    f"baseSequence={h.base_sequence} partitionLeaderEpoch={h.partition_leader_epoch} "
                    f"transactional={h.is_transactional} control={h.is_control}")


def run(args: argparse.Namespace) -> int:
    if args.store:
        store = open_store(args.store)
        try:
            dump(ObjectReader(store, args.object), args.records, print)
        finally:
            store.close()
    else:
        dump(ObjectReader(_LocalFile(args.object), args.object), args.records, print)
    return 0
