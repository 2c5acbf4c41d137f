"""`mqindex scrub [--data-dir D] [--store URL] [--metadata URL] [--index-dir DIR] [--index-store URL] [--json]`.

Reads every committed broker object (through the controller metadata), every merged index file of the cluster
(through the merged lists in the metadata; in the index store) and every uploaded index file (through
the manifests in the index directory) with ranged, memory-bounded reads and verifies every checksum
(jobs/scrub.py). Prints each damaged object with the failed check and the partitions and offset ranges it
holds; progress goes to stderr. Exits 0 when nothing is damaged, 2 when anything is.

A scrub only reads: a data directory, metadata database or local store that is not there is an error (exit 1),
never created, and so is a metadata database that holds nothing to check (a scrub in the wrong folder is not
reported as a healthy store).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from api.cli import data_dir, stores

if TYPE_CHECKING:
    from jobs.scrub import ScrubReport

DAMAGED_EXIT = 2


class NothingToScrub(RuntimeError):
    pass


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", default=None, help=data_dir.HELP)
    parser.add_argument("--store", metavar="URL", help="object store URL (default: file://DATA_DIR/objects)")
    parser.add_argument("--metadata", metavar="URL",
                        help="metadata database URL (default: sqlite:///DATA_DIR/metadata.sqlite)")
    parser.add_argument("--index-dir", metavar="DIR", help="index directory (default: DATA_DIR/index)")
    parser.add_argument("--index-store", metavar="URL", help="store of the index files (default: --store)")
    parser.add_argument("--namespace", default="_kafka_mqindex", help="object key namespace (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def format_report(report: ScrubReport) -> list[str]:
    lines = [f"checked {report.objects_checked} objects, {report.index_files_checked} index files, "
             f"{report.merged_files_checked} merged index files, "
             f"{report.filters_checked} key filters, {report.bytes_read} bytes read: {len(report.damaged)} damaged"]
    if report.filters_missing:
        lines.append(f"{len(report.filters_missing)} index files have no key filter (uploaded before filters "
                     f"existed; lookups read them): {', '.join(report.filters_missing[:5])}"
                     f"{' ...' if len(report.filters_missing) > 5 else ''}")
    for d in report.damaged:
        lines.append(f"DAMAGED {d.component} {d.object}: {d.check} ({d.error})")
        for r in d.ranges:
            lines.append(f"  {r.partition or '?'} {r.kind} stream {r.stream} offsets [{r.start}, {r.end})")
    return lines


def check_present(data: Path, given_data: bool, store: str, metadata: str, derived: tuple[bool, bool]) -> None:
    """Refuse, before anything is opened (opening would create them), what is not there."""
    where = "--data-dir" if given_data else "the default data directory: $MQINDEX_DATA_DIR, else ./data"
    if any(derived) and not data.is_dir():
        raise NothingToScrub(f"no data directory at {data} ({where}): run scrub with the server's --data-dir, "
                             f"or give --store and --metadata")
    try:
        stores.require_present(metadata, "metadata", "--metadata" if not derived[1] else where)
        stores.require_present(store, "object store", "--store" if not derived[0] else where)
    except stores.NotThere as exc:
        raise NothingToScrub(f"{exc}: nothing to scrub") from None


def run(args: argparse.Namespace) -> int:
    from api.config import Settings
    from broker.metadata import MetadataClient
    from broker.metadata.image import COMMITTED
    from broker.partitions.topics import TopicRegistry
    from index_service.state_folders import MANIFEST_EXT, UPLOADED
    from jobs.scrub import merged_file_keys, scrub
    from storage_tier import open_store

    given_data = args.data_dir is not None
    s = Settings(data_dir=args.data_dir or data_dir.default(), store=args.store or "",
                 metadata=args.metadata or "").resolved()
    check_present(Path(s.data_dir), given_data, s.store, s.metadata, (not args.store, not args.metadata))
    index_dir = Path(args.index_dir) if args.index_dir else Path(s.data_dir) / "index"
    store = open_store(s.store)
    index_store = stores.open_existing(args.index_store, "--index-store") if args.index_store else None
    meta = MetadataClient(s.metadata, node_id=-1, namespace=args.namespace)  # reads only: never registers
    try:
        meta.catch_up()
        objects = sum(1 for o in meta.image.objects.values() if o.state == COMMITTED)
        manifests = any((index_dir / UPLOADED).glob(f"*{MANIFEST_EXT}"))
        if not objects and not manifests and not TopicRegistry(meta).names() and not merged_file_keys(meta):
            raise NothingToScrub(f"the metadata database {s.metadata} holds no topics and no objects: nothing to "
                                 f"scrub (is it the server's? give its --data-dir or --metadata)")
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
