"""`mqindex inspect-index FILE`: dump an index file of either format (detected from its magic):
header, slot use, item count, time range and, with --topic and --key, the hits for a key."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from index_file.detect import FileFormat, open_reader
from index_file.errors import FormatError
from index_file.native_compacted import CompactedIndexReader
from index_file.native_unsealed import STATE_SEALED, NativeUnsealedReader
from index_file.rocketmq_format import MAGIC_END, RocketMQIndexReader
from index_file.source import BlobSource, ByteSource


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="index file path (or, with --store, the object key)")
    parser.add_argument("--store", metavar="URL", help="BlobStore URL to read FILE from with ranged GETs (s3://..., file://...)")
    parser.add_argument("--topic", help="topic of --key")
    parser.add_argument("--key", help="print the hits for this key (needs --topic)")
    parser.add_argument("--max", type=int, default=64, help="at most this many hits (default: %(default)s)")
    parser.add_argument("--begin", type=int, default=0, help="earliest store time, ms (default: %(default)s)")
    parser.add_argument("--end", type=int, default=None, help="latest store time, ms (default: no limit)")
    parser.add_argument("--slots", type=int, default=None,
                        help="slot count of a RocketMQ unsealed file (default 5,000,000; compacted: from the size)")


def _ts(ms: int | None) -> str:
    if ms is None:
        return "-"
    try:
        iso = dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        iso = "out of range"
    return f"{ms} ({iso})"


def describe(fmt: FileFormat, reader: object) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = [("format", fmt.value)]
    if isinstance(reader, NativeUnsealedReader):
        h, c = reader.header, reader.ckpt
        used = int((reader.slots() != 0).sum())
        rows += [("state", "SEALED" if c.state == STATE_SEALED else "WRITING"),
                 ("header", f"magic MQXU v1, {h.slot_count:,} slots, {h.max_items:,} max items, checkpoint seq "
                            f"{c.seq}, items crc32c {c.items_crc:08x}"),
                 ("slots used", f"{used:,} / {h.slot_count:,}"),
                 ("items", f"{c.count:,} / {h.max_items:,}"),
                 ("begin", _ts(h.begin_ms)),
                 ("store times", f"{_ts(c.min_ms if c.count else None)} .. {_ts(c.max_ms if c.count else None)}")]
    elif isinstance(reader, CompactedIndexReader):
        h = reader.header
        rows += [("state", "COMPACTED"),
                 ("header", f"magic MQXC v1, {h.block_count:,} blocks of {h.items_per_block} items, "
                            f"summary {reader.summary_bytes():,} B at {h.summary_offset:,}"),
                 ("slots used", f"(sorted blocks) {h.block_count:,} blocks"),
                 ("items", f"{h.item_count:,}"),
                 ("begin", _ts(h.begin_ms)),
                 ("store times", f"{_ts(reader.min_time_ms)} .. {_ts(reader.max_time_ms)}")]
    elif isinstance(reader, RocketMQIndexReader):
        h = reader.header
        rows += [("state", reader.layout.upper()),
                 ("header", f"magic 0x{h.magic:08X} ({'end' if h.magic == MAGIC_END else 'open'}), "
                            f"{reader.slot_count:,} slots, {reader.max_items:,} max items"),
                 ("slots used", f"{h.used_slots:,} / {reader.slot_count:,}"),
                 ("items", f"{h.item_count:,}"),
                 ("begin", _ts(h.begin_ms)),
                 ("store times", f".. {_ts(h.end_ms)} (end timestamp)")]
    return rows


def run(args: argparse.Namespace) -> int:
    if args.key is not None and args.topic is None:
        print("mqindex inspect-index: --key needs --topic (keys are indexed as topic#key)", file=sys.stderr)
        return 2
    source: ByteSource | str
    store = None
    if args.store:
        from api.cli import stores

        store = stores.open_existing(args.store, "--store")
        source = BlobSource(store, args.file)
    elif not Path(args.file).is_file():
        print(f"mqindex inspect-index: no such index file {args.file!r} (give --store URL to read a key from a store)",
              file=sys.stderr)
        return 1
    else:
        source = args.file
    try:
        fmt, reader = open_reader(source, rocketmq_slots=args.slots)
        for name, value in describe(fmt, reader):
            print(f"{name:<12} {value}")
        if args.key is not None:
            hits = reader.query(args.topic, args.key, args.max, args.begin, args.end)  # type: ignore[attr-defined]
            print(f"hits         {len(hits)} for {args.topic}#{args.key}"
                  + ("" if fmt is not FileFormat.ROCKETMQ else " (32-bit hash: candidates, verify the records)"))
            for h in hits:
                print(f"  partition {h.queue_id} offset {h.offset} size {h.size} time {_ts(h.store_time_ms)}")
        reader.close()  # type: ignore[attr-defined]
        return 0
    except FormatError as exc:
        print(f"mqindex inspect-index: {exc}", file=sys.stderr)
        return 1
    finally:
        if store is not None:
            store.close()
