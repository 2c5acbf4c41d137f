"""`mqindex scrub [--data-dir D] [--store URL] [--metadata URL] [--index-dir DIR] [--index-store URL] [--json]`.

Reads every committed broker object (through the controller metadata) and every uploaded index file (through
the manifests in the index directory) with ranged, memory-bounded reads and verifies every checksum
(jobs/scrub.py). Prints each damaged object with the failed check and the partitions and offset ranges it
holds; progress goes to stderr. Exits 0 when nothing is damaged, 2 when anything is.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from api.config import Settings
from broker.metadata import MetadataClient
from broker.node import DEFAULT_NAMESPACE
from jobs.scrub import ScrubReport, scrub
from storage_tier import open_store

DAMAGED_EXIT = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", default="./data", help="the server's data directory (for the defaults)")
    parser.add_argument("--store", metavar="URL", help="object store URL (default: the data directory's)")
    parser.add_argument("--metadata", metavar="URL", help="metadata database URL (default: the data directory's)")
    parser.add_argument("--index-dir", metavar="DIR", help="index directory (default: DATA_DIR/index)")
    parser.add_argument("--index-store", metavar="URL", help="store of the index files (default: --store)")
    parser.add_argument("--namespace", default=DEFAULT_NAMESPACE, help="object key namespace")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def format_report(report: ScrubReport) -> list[str]:
    lines = [f"checked {report.objects_checked} objects, {report.index_files_checked} index files, "
             f"{report.bytes_read} bytes read: {len(report.damaged)} damaged"]
    for d in report.damaged:
        lines.append(f"DAMAGED {d.component} {d.object}: {d.check} ({d.error})")
        for r in d.ranges:
            lines.append(f"  {r.partition or '?'} {r.kind} stream {r.stream} offsets [{r.start}, {r.end})")
    return lines


def run(args: argparse.Namespace) -> int:
    s = Settings(data_dir=args.data_dir, store=args.store or "", metadata=args.metadata or "").resolved()
    index_dir = Path(args.index_dir) if args.index_dir else Path(s.data_dir) / "index"
    store = open_store(s.store)
    index_store = open_store(args.index_store) if args.index_store else None
    meta = MetadataClient(s.metadata, node_id=-1, namespace=args.namespace)  # reads only: never registers
    try:
        report = scrub(store, meta, index_store, index_dir if index_dir.is_dir() else None,
                       progress=lambda msg: print(f"scrub: {msg}", file=sys.stderr, flush=True))
    finally:
        meta.close()
        store.close()
        if index_store is not None:
            index_store.close()
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print("\n".join(format_report(report)))
    return DAMAGED_EXIT if report.damaged else 0
