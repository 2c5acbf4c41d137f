"""`mqindex spark-build`: batch-build compacted indexes of a topic from the broker's objects with PySpark.

    mqindex spark-build --metadata URL --store URL --index-dir DIR --topic T [--partitions 0,1]
        [--from TS --to TS] [--keys record-key,KEYS,UNIQ_KEY] [--master local[*]|spark://host:7077]
        [--conf spark.pyspark.python=/path/to/python ...] [--ship-code]

TS is milliseconds since the epoch or an ISO 8601 time (UTC unless it has an offset); the window is
[from, to). Arguments are checked and the metadata read before Spark starts, so a bad topic, partition
or window fails in a second with exit code 2. See docs/SPARK.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from api.cli import data_dir
from jobs.spark_build import (
    DEFAULT_MAX_ITEMS,
    DEFAULT_NAMESPACE,
    DEFAULT_SLOTS,
    HOUR_MS,
    MERGED_MAX_ITEMS,
    MERGED_WINDOW_MS,
    BuildError,
    BuildFailed,
    BuildOptions,
    parse_time,
    run_build,
)


def index_dir(args: argparse.Namespace) -> Path:
    if args.index_dir:
        return Path(args.index_dir)
    return Path(args.data_dir or data_dir.default()) / "index"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metadata", required=True, help="controller metadata URL (sqlite:///... or postgresql://...)")
    parser.add_argument("--store", required=True, help="the broker's object store URL (s3://bucket/prefix?endpoint=...)")
    parser.add_argument("--index-store", dest="index_store", default=None,
                        help="store the index files go to (default: --store, as the broker's own index)")
    parser.add_argument("--index-dir", dest="index_dir", help="the index service directory to register the build in")
    parser.add_argument("--data-dir", dest="data_dir", help=data_dir.HELP + "; the index is DATA_DIR/index")
    parser.add_argument("--topic", required=True, help="topic to index")
    parser.add_argument("--partitions", default=None, help="comma-separated partitions (default: all)")
    parser.add_argument("--from", dest="from_ts", default=None, help="window start (inclusive): ms or ISO 8601")
    parser.add_argument("--to", dest="to_ts", default=None, help="window end (exclusive): ms or ISO 8601")
    parser.add_argument("--keys", default="record-key,KEYS,UNIQ_KEY",
                        help="which keys to index: record-key, KEYS (header, space separated), UNIQ_KEY (header)")
    parser.add_argument("--master", default="local[*]", help="Spark master: local[*] (default), local[N], "
                                                              "spark://host:7077")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="extra Spark configuration (repeatable), e.g. spark.executor.memory=4g")
    parser.add_argument("--ship-code", dest="ship_code", action="store_true",
                        help="ship mqindex's own packages to the executors as a zip (for workers without mqindex "
                             "installed; their Python still needs the third-party packages, see docs/SPARK.md)")
    parser.add_argument("--namespace", default=DEFAULT_NAMESPACE, help="object key namespace of the broker")
    parser.add_argument("--merged", action="store_true",
                        help="write merged history directly: a file per week of up to 16,000,000 items with its key "
                             "filter (the service's top merge tier), so months of backfill make a few large files "
                             "instead of one per hour")
    parser.add_argument("--window-ms", dest="window_ms", type=int, default=0,
                        help=f"time window of one file (default {HOUR_MS // 60_000} min, the online files' roll age; "
                             f"--merged: {MERGED_WINDOW_MS // HOUR_MS} h)")
    parser.add_argument("--max-items", dest="max_items", type=int, default=0,
                        help=f"most items (keys) per file (default the online files' {DEFAULT_MAX_ITEMS:,}; "
                             f"--merged: {MERGED_MAX_ITEMS:,})")
    parser.add_argument("--slots", type=int, default=DEFAULT_SLOTS, help="hash slots of the files while built")
    parser.add_argument("--wait-served", dest="wait_served", type=float, default=30.0,
                        help="seconds to wait for a running service to adopt the build")
    parser.add_argument("--progress-interval", dest="progress_interval", type=float, default=2.0,
                        help="seconds between progress lines (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def options(args: argparse.Namespace) -> BuildOptions:
    """BuildOptions from parsed arguments; BuildError for a malformed one."""
    parts = None
    if args.partitions is not None:
        try:
            parts = [int(p) for p in args.partitions.split(",") if p.strip()]
        except ValueError:
            raise BuildError(f"--partitions {args.partitions!r} must be comma-separated integers") from None
    conf = {}
    for item in args.conf:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise BuildError(f"--conf {item!r} must be KEY=VALUE")
        conf[k] = v
    return BuildOptions(metadata_url=args.metadata, store_url=args.store, index_dir=str(index_dir(args)),
                        topic=args.topic, partitions=parts, from_ms=parse_time(args.from_ts, "--from"),
                        to_ms=parse_time(args.to_ts, "--to"), kinds=tuple(args.keys.split(",")), master=args.master,
                        index_store_url=args.index_store, namespace=args.namespace, window_ms=args.window_ms,
                        max_items=args.max_items, merged=args.merged, slots=args.slots, spark_conf=conf,
                        progress_interval_s=args.progress_interval, wait_served_s=args.wait_served,
                        ship_code=args.ship_code)


def run(args: argparse.Namespace) -> int:
    try:
        opts = options(args)
        summary = run_build(opts)
    except BuildError as exc:
        print(f"mqindex spark-build: error: {exc}", file=sys.stderr)
        return 2
    except BuildFailed as exc:
        print(f"mqindex spark-build: failed: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(summary.as_dict(), indent=2))
    else:
        print(f"build {summary.name} attempt {summary.attempt}: {summary.files} file(s), {summary.items:,} items "
              f"from {summary.records_indexed:,} records in {summary.windows} window(s); "
              f"{summary.records_read:,} records read ({summary.bytes_read:,} bytes) in {summary.seconds:.1f}s "
              f"= {summary.records_per_s:,.0f} records/s; {summary.bytes_uploaded:,} bytes uploaded; "
              f"{'served' if summary.served else 'registered (served after the service adopts it)'}"
              f"{f', replaced {summary.replaced_files} file(s) of an earlier run' if summary.replaced_files else ''}")
        for m in summary.manifests:
            print(f"  {m['stem']}: {m['items']:,} items, store times {m['min_ms']}..{m['max_ms']}, {m['key']}")
    return 0 if summary.files else 1
