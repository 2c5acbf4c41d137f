"""`mqindex search`: find messages of a topic by key or by any SQL predicate, run as a Spark job that reads
the topic straight from the object store (jobs/spark_source).

    mqindex search TOPIC --metadata URL --store URL [--key K ...] [--where "SQL predicate"]
        [--from TS --to TS] [--index URL] [--master local[2]|spark://host:7077] [--conf KEY=VALUE ...]
        [--limit N] [--json]

In `--where`, `key` and `value` are text (UTF-8, invalid bytes replaced) and `headers` a map of text
to text (a name given twice: its last value); `topic`, `partition`, `offset`, `timestamp` as in the
Spark source. `--key` is matched on the raw key and answered through the key index when `--index` names
a node. Matches are printed as they come, progress on stderr: one per line (a key or value that is not UTF-8 as
`base64:...`), or with --json the object the HTTP API answers for the message (key and value text or base64,
`key_encoding` and `encoding` saying which, `headers`, and `header_list` when `headers` does not hold the headers
exactly: docs/MESSAGES.md).
Exit codes: 0 matches printed, 1 none, 2 bad arguments (an unknown topic, a bad time or predicate:
reported before any object is read).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import threading
import time
from typing import Any, TextIO

from api.cli.one_line import visible as _visible
from jobs.spark_session import describe_session, session_setup, spark_session
from jobs.value_search import (
    SearchError,
    SearchSpec,
    bad_predicate_message,
    is_bad_predicate,
    match_message,
    matches_frame,
    parse_time,
    plan_search,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topic", help="topic to search")
    parser.add_argument("--metadata", required=True, help="controller metadata URL (sqlite:///... or postgresql://...)")
    parser.add_argument("--store", required=True, help="the broker's object store URL (s3://bucket/prefix?endpoint=...)")
    parser.add_argument("--key", action="append", default=[], help="a key to find (repeatable)")
    parser.add_argument("--where", default=None, help="SQL predicate over key, value, headers (text), topic, "
                                                      "partition, offset, timestamp, e.g. \"value LIKE '%%failed%%'\"")
    parser.add_argument("--from", dest="from_ts", default=None, help="window start (inclusive): ms or ISO 8601")
    parser.add_argument("--to", dest="to_ts", default=None, help="window end (exclusive): ms or ISO 8601")
    parser.add_argument("--index", default=None, help="HTTP URL of an mqindex serve node: --key through the index")
    parser.add_argument("--partitions", default=None, help="comma-separated partitions (default: all)")
    parser.add_argument("--master", default="local[2]", help="Spark master: local[N], local[*], spark://host:7077")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="extra Spark configuration (repeatable)")
    parser.add_argument("--limit", type=int, default=None, help="stop after N matches (default: all)")
    parser.add_argument("--json", action="store_true", help="one JSON object per match")
    parser.add_argument("--progress-interval", dest="progress_interval", type=float, default=2.0,
                        help="seconds between progress lines on stderr")


def search_spec(args: argparse.Namespace) -> SearchSpec:
    """The search the arguments describe; SearchError for a bad time."""
    return SearchSpec(topic=args.topic, metadata=args.metadata, store=args.store, keys=tuple(args.key),
                      where=args.where, from_ms=parse_time(args.from_ts, "--from"),
                      to_ms=parse_time(args.to_ts, "--to"), index=args.index, partitions=args.partitions)


def _shown(text: str | None, encoding: str) -> str:
    """A key or value of the message's JSON on one line: text, or `base64:...` for bytes that are not UTF-8."""
    return f"base64:{text}" if encoding == "base64" else _visible(text)


def _line(row: Any, topic_id: int, as_json: bool) -> str:
    from api.http.message_json import message_dict  # the HTTP API's JSON of a message

    m = message_dict(match_message(row, topic_id))
    if as_json:
        return json.dumps(m, ensure_ascii=False)
    ts = dt.datetime.fromtimestamp(m["timestamp"] / 1000, dt.UTC)
    return (f"{row.topic}/{row.partition}@{row.offset}\t{ts.isoformat(timespec='milliseconds')}"
            f"\t{_shown(m['key'], m['key_encoding'])}\t{_shown(m['value'], m['encoding'])}")


class _Progress:
    """Tasks done / total of the running Spark jobs, on stderr every `interval` seconds."""

    def __init__(self, sc: Any, out: TextIO, interval: float) -> None:
        self.sc, self.out, self.interval = sc, out, interval
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="search-progress")

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self.stop.wait(self.interval):
            tracker = self.sc.statusTracker()
            done = total = 0
            for sid in tracker.getActiveStageIds():
                info = tracker.getStageInfo(sid)
                if info is not None:
                    done += info.numCompletedTasks
                    total += info.numTasks
            print(f"[search] {time.monotonic() - t0:.0f}s: tasks {done}/{total}", file=self.out, flush=True)


def run_search(args: argparse.Namespace, spark: Any = None, out: TextIO | None = None,
               err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    try:
        spec = search_spec(args)
        planned = plan_search(spec)  # an unknown topic or bad option: exit 2 before Spark starts
    except SearchError as exc:
        print(f"mqindex search: {exc}", file=err)
        return 2
    plan, topic_id = planned.plan, planned.topic_ids[spec.topic]
    print(f"[search] {args.topic}: {plan.describe()['objects']} objects, {len(plan.splits)} splits", file=err)
    own = spark is None
    if own:
        conf = dict(c.split("=", 1) for c in args.conf if "=" in c)
        conf.setdefault("spark.ui.enabled", "false")
        spark = spark_session(args.master, session_setup(args.master, conf), app_name="mqindex-search")
        spark.sparkContext.setLogLevel("ERROR")
        print(f"[search] {describe_session(spark.sparkContext)}", file=err)
    progress = _Progress(spark.sparkContext, err, args.progress_interval)
    progress.thread.start()
    found = 0
    read_from_store = ""
    try:
        try:
            df = matches_frame(spark, spec, limit=args.limit, raw=True)
        except Exception as exc:  # noqa: BLE001 - an analysis error of --where is a bad argument
            if is_bad_predicate(exc):
                print(f"mqindex search: --where: {bad_predicate_message(exc)}", file=err)
                return 2
            raise
        for row in df.toLocalIterator():
            print(_line(row, topic_id, args.json), file=out, flush=True)
            found += 1
        from jobs.spark_source.columnar import store_reads  # pyarrow: loaded once a search runs

        try:
            reads = store_reads(df)  # the JVM reader's scan metrics (none for a read through the index)
        except Exception:  # noqa: BLE001 - a figure of the summary only: the matches are printed
            reads = None
        read_from_store = f" ({reads.bytes / 1e6:.1f} MB read from the store in {reads.gets} GETs)" \
            if reads is not None and reads.gets else ""
    finally:
        progress.stop.set()
        progress.thread.join()
        if own:
            spark.stop()
    print(f"[search] done: {found} matches{read_from_store}", file=err)
    return 0 if found else 1


def run(args: argparse.Namespace) -> int:
    return run_search(args)
