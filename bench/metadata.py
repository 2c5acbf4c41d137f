"""Metadata open time and image memory at 10 k, 100 k and 1 M upload commits, with and without snapshots.

The log is what one broker node writes in a steady state: every upload prepares an object and commits a
stream set object with one range on each of 10 streams; retention trims every stream to the newest
`--live` commits every 100 commits and cleanup deletes the destroyed objects. The records are
bulk-inserted (encoded as the client encodes them). With snapshots, a running client (the broker) catches
up after every `--every` records and calls `maybe_snapshot()`, exactly as the node's maintenance would;
the log is truncated behind the kept snapshots. Then a new client is opened (a node restarting or joining)
and timed; its image's memory is measured with tracemalloc in a second open. The peer is the same open
without snapshots (a full replay); sizes above `--full-replay-max` are estimated from the largest measured
full replay by its per-record rate, and marked so.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common import emit, fmt, progress, save_results, table
from broker.metadata import MetadataClient
from broker.metadata.log_store import open_log

STREAMS = 10
STEP = 100  # offsets per stream per commit
TRIM_EVERY = 100
T0 = 1_700_000_000_000


def workload(commits: int, live: int) -> Iterator[dict[str, Any]]:
    """The records of `commits` uploads by node 0 with retention keeping the newest `live` commits."""
    yield {"type": "node", "node_id": 0, "epoch": 0}
    for sid in range(STREAMS):
        yield {"type": "stream_create", "stream_id": sid, "start": 0}
    for sid in range(STREAMS):
        yield {"type": "stream_open", "stream_id": sid, "epoch": 0, "node_id": 0, "range_index": 0}
    deleted_below = 0
    for i in range(commits):
        at = T0 + 2000 * i
        yield {"type": "objects_prepare", "first_id": i, "count": 1, "at": at, "expires_at": at + 600_000}
        yield {"type": "commit", "node_id": 0, "at": at, "stream_objects": [],
               "sso": {"object_id": i, "size": 8 << 20,
                       "ranges": [[sid, i * STEP, (i + 1) * STEP] for sid in range(STREAMS)]}}
        if (i + 1) % TRIM_EVERY == 0 and i + 1 > live:
            cut = i + 1 - live  # commits [0, cut) fall out of retention
            for sid in range(STREAMS):
                yield {"type": "stream_trim", "stream_id": sid, "start": cut * STEP, "at": at}
            yield {"type": "objects_deleted", "ids": list(range(deleted_below, cut))}
            deleted_below = cut


def expected_records(commits: int, live: int) -> int:
    """How many records `workload(commits, live)` yields (for the progress line)."""
    return 1 + 2 * STREAMS + 2 * commits + max(0, commits // TRIM_EVERY - live // TRIM_EVERY) * (STREAMS + 1)


def build(url: str, commits: int, live: int, snapshots: bool, every: int, tail: int) -> dict[str, Any]:
    """Write the log (and, with `snapshots`, run a broker client that snapshots as it goes, every `every`
    records, placed so that the last `tail` records come after the newest snapshot whatever the size)."""
    log = open_log(url)
    broker = MetadataClient(url, 0, snapshot_every_records=every) if snapshots else None
    chunk: list[dict[str, Any]] = []
    offset = 0
    started = time.perf_counter()
    written = 0
    next_report = 500_000
    total = expected_records(commits, live)
    limit = ((total - tail) % every or every) if snapshots else 50_000  # the first chunk aligns the snapshots

    def flush() -> None:
        nonlocal offset, written
        with log.locked() as txn:
            txn.append(offset, chunk)
        offset += len(chunk)
        chunk.clear()
        if broker is not None:
            broker.catch_up()
            if broker.maybe_snapshot() is not None:
                written += 1

    for rec in workload(commits, live):
        chunk.append(rec)
        if len(chunk) >= limit and offset + len(chunk) <= total - tail:
            flush()
            limit = every if snapshots else 50_000
            if offset >= next_report:
                next_report += 500_000
                progress(f"log of {commits:,} commits ({'with' if snapshots else 'no'} snapshots)", offset,
                         total, started)
    if chunk:
        tail = list(chunk)
        chunk.clear()
        with log.locked() as txn:
            txn.append(offset, tail)
        offset += len(tail)
    out = {"records": offset, "snapshots_written": written, "first_kept": log.first_offset(),
           "newest_snapshot": (log.snapshots() or [None])[0]}
    if broker is not None:
        broker.close()
    log.close()
    return out


def open_time(url: str, repeat: int) -> tuple[float, MetadataClient]:
    times = []
    client = None
    for _ in range(repeat):
        if client is not None:
            client.close()
        gc.collect()
        t = time.perf_counter()
        client = MetadataClient(url, 9)
        times.append(time.perf_counter() - t)
    assert client is not None
    return statistics.median(times), client


def image_memory(url: str) -> tuple[float, float]:
    """(retained MiB after the open, peak MiB during it) by tracemalloc."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    client = MetadataClient(url, 9)
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    client.close()
    return (current - before) / 2**20, (peak - before) / 2**20


def metadata_url(work: Path, pg: str | None, commits: int, snapshots: bool, schemas: list[str]) -> str:
    """A fresh metadata database: a SQLite file in `work`, or a new schema of the PostgreSQL at `pg`."""
    name = f"meta-{commits}-{'snap' if snapshots else 'full'}"
    if pg is None:
        return f"sqlite:///{work}/{name}.db"
    schema = f"bench_metadata_{uuid.uuid4().hex[:10]}_{name.replace('-', '_')}"
    schemas.append(schema)
    return f"{pg}{'&' if '?' in pg else '?'}schema={schema}"


def drop_schemas(pg: str, schemas: list[str]) -> None:
    import psycopg

    with psycopg.connect(pg, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def measure(url: str, commits: int, live: int, snapshots: bool, every: int, tail: int) -> dict[str, Any]:
    t = time.perf_counter()
    built = build(url, commits, live, snapshots, every, tail)
    print(f"[bench] built {built['records']:,} records in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    seconds, client = open_time(url, 3 if snapshots else 1)
    tail_records = client.image.offset - (built["newest_snapshot"].log_offset if built["newest_snapshot"] else -1)
    live_objects = len(client.image.objects)
    ends = {s.end_offset for s in client.image.streams.values()}
    assert ends == {commits * STEP}, f"the opened image is not the built one: stream ends {ends}"
    assert not snapshots or tail_records == tail, f"{tail_records} records after the newest snapshot, not {tail}"
    client.close()
    retained, peak = image_memory(url)
    print(f"[bench] {commits:,} commits, {'snapshot + tail' if snapshots else 'full replay'}: open {seconds:.3f} s, "
          f"tail {tail_records:,} records, image {retained:.2f} MiB, peak {peak:.2f} MiB", file=sys.stderr, flush=True)
    return {"commits": commits, "snapshots": snapshots, "records": built["records"], "open_s": seconds,
            "tail_records": tail_records, "live_objects": live_objects, "image_mib": retained, "peak_mib": peak,
            "log_rows_kept": built["records"] - (built["first_kept"] or 0), "estimated": False}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mqindex bench metadata", description=__doc__.split("\n\n")[0])
    ap.add_argument("--commits", default="10000,100000,1000000", help="upload commit counts")
    ap.add_argument("--live", type=int, default=1800, help="commits kept by retention (1 h at one per 2 s)")
    ap.add_argument("--every", type=int, default=10_000, help="snapshot_every_records of the running broker")
    ap.add_argument("--tail", type=int, help="log records after the newest snapshot when the node opens, the "
                                             "same at every size (default: half of --every, a node opening at a "
                                             "random moment; at most --every - 1)")
    ap.add_argument("--full-replay-max", type=int, default=100_000,
                    help="largest commit count measured without snapshots; larger ones are estimated")
    ap.add_argument("--dir", help="work directory (default: a temporary one, removed after)")
    ap.add_argument("--pg", metavar="DSN", help="measure on PostgreSQL (postgresql://...; a fresh schema per "
                                                "measurement, dropped after) instead of SQLite files")
    args = ap.parse_args(argv)
    if args.tail is None:
        args.tail = args.every // 2
    if not 0 <= args.tail < args.every:
        ap.error("--tail must be 0 to --every - 1")
    sizes = [int(x) for x in args.commits.split(",")]
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-metadata-"))
    work.mkdir(parents=True, exist_ok=True)
    schemas: list[str] = []
    try:
        results: list[dict[str, Any]] = []
        measured_full: dict[str, Any] | None = None
        for n in sizes:
            snap = measure(metadata_url(work, args.pg, n, True, schemas), n, args.live, True, args.every, args.tail)
            if n <= args.full_replay_max:
                full = measure(metadata_url(work, args.pg, n, False, schemas), n, args.live, False, args.every,
                               args.tail)
                measured_full = full
            else:
                if measured_full is None:
                    raise SystemExit("--full-replay-max is below every size: nothing to estimate from")
                scale = snap["records"] / measured_full["records"]
                full = dict(measured_full, commits=n, records=snap["records"], estimated=True,
                            open_s=measured_full["open_s"] * scale, log_rows_kept=snap["records"])
            results += [snap, full]
        rows = []
        for r in results:
            peer = next(x for x in results if x["commits"] == r["commits"] and not x["snapshots"])
            rows.append([f"{r['commits']:,}", "snapshot + tail" if r["snapshots"] else "full replay",
                         r["records"], r["log_rows_kept"], r["tail_records"] if r["snapshots"] else "-",
                         fmt(r["open_s"]) + (" (est.)" if r["estimated"] else ""),
                         fmt(peer["open_s"] / r["open_s"]), r["live_objects"],
                         fmt(r["image_mib"]) + (" (at the measured size)" if r["estimated"] else ""),
                         fmt(r["peak_mib"])])
        backend = "PostgreSQL" if args.pg else "SQLite"
        emit(table(f"Metadata open ({backend}, {STREAMS} streams, retention {args.live} commits, "
                   f"snapshot every {args.every:,} records, {args.tail:,} records after the newest)",
                   ["commits", "open from", "log records", "rows kept", "tail", "open s", "full/this",
                    "live objects", "image MiB", "peak MiB"], rows))
        if any(r["estimated"] for r in results):
            print(f"Full replay above --full-replay-max {args.full_replay_max:,} commits was not run: its open time "
                  f"is estimated from the largest measured one by its per-record rate, marked (est.).")
        path = save_results("metadata", {"args": vars(args), "results": results})
        print(f"[bench] results in {path}", file=sys.stderr)
        return 0
    finally:
        if args.pg and schemas:
            drop_schemas(args.pg, schemas)
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
