"""Key lookups over a history of many index files, cold, with and without key filters (SeaweedFS S3).

Writes `--messages` keyed messages spread over `--days` of store time through the index service's real writer,
compaction and upload (files roll every `--messages / --files` items), closes the service, opens it again
cold and looks up keys with no time range: keys present (each in one file; a tenth of the messages share 1,000
repeated keys, the lookups ask the unique ones) and keys absent. For each it prints object store GETs per lookup
and p50/p99 latency, with the key filters and without them (the same files and fences, every file in range
asked), next to the RocketMQ layout's cost for the same files (2 GETs per file in range, no filters), and the
bytes per message of the index files and of their filters.

    python -m bench.history --messages 1000000 --files 200

`--hourly-days D` (repeatable) writes D days of hourly index files instead (`--per-file` messages each), looks keys
up cold with the files as written, then runs the service's tier merges (closed days into day files, closed weeks
into week files), and looks the same keys up cold again: files asked, files read and GETs per lookup, with merges
and without.

    python -m bench.history --hourly-days 30 --hourly-days 90 --per-file 100
"""

from __future__ import annotations

import argparse
import gc
import itertools
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import percentile, save_results, store_or_seaweedfs

DAY_MS = 86_400_000


class _Clock:
    """The service's clock: the store time of the history being written (files begin at their first entry)."""

    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def _key(i: int) -> str:
    return f"r{i % 1000}" if i % 10 == 0 else f"u{i}"


def _batch(lo: int, hi: int, t0: int, step: float) -> list[tuple[Any, ...]]:
    """Messages lo..hi-1 as the writer's records, built column-wise (numpy and C-level map/zip, no Python bytecode
    per message): partition i % 16, offset i, 100 bytes, store time t0 + i * step, one key (_key(i): every tenth
    message one of 1,000 repeated keys, the others unique)."""
    ids = np.arange(lo, hi, dtype=np.int64)
    keys = list(map("u{}".format, range(lo, hi)))
    first = -lo % 10
    keys[first::10] = map("r{}".format, (ids[first::10] % 1000).tolist())
    times = (t0 + (ids * step).astype(np.int64)).tolist()
    return list(zip(itertools.repeat("orders"), (ids % 16).tolist(), ids.tolist(), itertools.repeat(100), times,
                    zip(keys), strict=False))


def cpu_s() -> float:
    """CPU seconds of this process so far (every thread: the writer, compaction, uploads, merges, lookups)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _write(idx: Path, store_url: str, n: int, files: int, days: float, t0: int,
           chunk: int = 100_000) -> dict[str, Any]:
    """The history as written: files of n // files items compacted and uploaded, none merged (merges run in
    _merge). Records go through IndexService.put_batch in batches of `chunk`; the service compacts and uploads
    sealed files every few batches, as the background would."""
    from index_service import IndexService

    per_file = max(1, n // files)
    step = days * DAY_MS / n
    clock = _Clock(t0)
    started, cpu0 = time.perf_counter(), cpu_s()
    svc = IndexService.open(idx, store=store_url, max_items=per_file, slots=max(1024, min(per_file // 4, 262_144)),
                            maintain_interval_s=0, roll_age_ms=1 << 50, clock=clock, merge_tiers_ms=())
    try:
        every = max(1, 500_000 // chunk)
        for b, lo in enumerate(range(0, n, chunk)):
            gc.disable()  # the batch's tuples are not cycles: no collector passes over them while they are built
            try:
                recs = _batch(lo, min(n, lo + chunk), t0, step)
            finally:
                gc.enable()
            clock.now = recs[-1][4]
            svc.put_batch(recs)
            del recs
            if b % every == every - 1:
                svc.flush(timeout=None)  # (thousands of small files roll in one flush: no bound but the writer's)
                svc.maintain()  # compact and upload as the history grows, as the background would
            if n >= 10_000_000 and lo // chunk % 100 == 99:
                rate = (lo + chunk) / (time.perf_counter() - started)
                print(f"[bench] written {lo + chunk:,} of {n:,} ({rate:,.0f} messages/s)", flush=True)
        svc.flush(timeout=None)
        svc.roll()
        svc.maintain()
        infos = svc.files()
    finally:
        svc.close()
    uploaded = [f for f in infos if f.state.value == "UPLOADED"]
    filter_bytes = sum(p.stat().st_size for p in (idx / "uploaded").glob("*.filter"))
    wall, cpu = time.perf_counter() - started, cpu_s() - cpu0
    return {"files": len(uploaded), "index_bytes": sum(f.size_bytes for f in uploaded), "filter_bytes": filter_bytes,
            "write_s": round(wall, 1), "write_cpu_s": round(cpu, 1), "write_rate": round(n / wall)}


def _merge(idx: Path, store_url: str, now: int) -> dict[str, Any]:
    """The service's tier merges over the written history at store time `now`, cycle after cycle (the clock moved
    past each merge's grace) until nothing is left to merge."""
    from index_service import IndexService

    clock = _Clock(now)
    started, cpu0 = time.perf_counter(), cpu_s()
    svc = IndexService.open(idx, store=store_url, maintain_interval_s=0, roll_age_ms=1 << 50, clock=clock)
    merges = 0
    try:
        while True:
            rep = svc.maintain()
            if rep.failed:
                raise RuntimeError(f"merge failed: {rep.failed}")
            merges += len(rep.merged)
            if not rep.merged and not rep.released:
                break
            clock.now += svc.config.merge_grace_ms + 1
        uploaded = [f for f in svc.files() if f.state.value == "UPLOADED"]
        written = svc.background.merger.stats.bytes_written
    finally:
        svc.close()
    return {"merges": merges, "files": len(uploaded), "merge_bytes": written,
            "merged_index_bytes": sum(f.size_bytes for f in uploaded),
            "merged_filter_bytes": sum(p.stat().st_size for p in (idx / "uploaded").glob("*.filter")),
            "merge_s": round(time.perf_counter() - started, 1), "merge_cpu_s": round(cpu_s() - cpu0, 1)}


def _lookups(idx: Path, store_url: str, keys: list[str], filters: bool, filter_cache_bytes: int | None = None,
             map_filters: bool = True) -> dict[str, float]:
    """Lookups of `keys` on the service opened cold; `filter_cache_bytes` bounds its filter cache (default: the
    service's), `map_filters=False` reads every filter file into memory instead of mapping the large ones."""
    from index_service import IndexService
    from index_service.query import QueryStats

    extra = {} if filter_cache_bytes is None else {"filter_cache_bytes": filter_cache_bytes}
    svc = IndexService.open(idx, store=store_url, maintain_interval_s=0, key_filters=filters, **extra)
    if not map_filters:
        svc.filters.map_min_bytes = 1 << 62
    meter = svc.store.meter  # type: ignore[union-attr]
    gets: list[int] = []
    lat: list[float] = []
    read: list[int] = []
    asked: list[int] = []
    cpu0 = cpu_s()
    try:
        for k in keys:
            before = meter.snapshot()
            stats = QueryStats()
            t = time.perf_counter()
            svc.query_async("orders", k, 10, stats=stats).result()
            lat.append(time.perf_counter() - t)
            gets.append((meter.snapshot() - before)["GET"])
            read.append(stats.files_read)
            asked.append(stats.files_considered)
        held = svc.filters.bytes_held
        cpu_ms = 1e3 * (cpu_s() - cpu0) / len(keys)
    finally:
        svc.close()
    return {"gets_mean": sum(gets) / len(gets), "gets_p99": percentile(gets, 99), "p50_ms": percentile(lat, 50) * 1e3,
            "p99_ms": percentile(lat, 99) * 1e3, "filter_memory": held, "files_read": sum(read) / len(read),
            "files_asked": sum(asked) / len(asked), "cpu_ms": cpu_ms}


def _hourly(work: Path, store_url: str, days: int, per_file: int, lookups: int) -> dict[str, Any]:
    """One history of `days` of hourly files: lookups cold as written, then merged, then cold again."""
    n = days * 24 * per_file
    t0 = int(time.time() * 1000) - days * DAY_MS - 2 * 3_600_000
    idx = work / f"idx-{days}d"
    print(f"[bench] {days} days of hourly files, {per_file} messages each ({n:,} messages)", flush=True)
    built = _write(idx, store_url, n, days * 24, days, t0)
    rng = random.Random(days)
    present = [f"u{i}" for i in rng.sample(range(n), lookups * 2) if i % 10][:lookups]
    absent = [f"absent-{rng.getrandbits(48)}" for _ in range(lookups)]
    rows: dict[str, Any] = {}
    for kind, keys in (("present", present), ("absent", absent)):
        rows[f"unmerged-{kind}"] = _lookups(idx, store_url, keys, True)
    merged = _merge(idx, store_url, int(time.time() * 1000))
    for kind, keys in (("present", present), ("absent", absent)):
        rows[f"merged-{kind}"] = _lookups(idx, store_url, keys, True)
    return {"days": days, "per_file": per_file, "messages": n, **built, "files_written": built["files"], **merged,
            "rows": rows}


def _print_hourly(r: dict[str, Any]) -> None:
    print(f"\n{r['days']} days of hourly files ({r['messages']:,} messages): {r['files_written']} uploaded files, "
          f"{r['files']} "
          f"after {r['merges']} merges (written in {r['write_s']} s, merged in {r['merge_s']} s), cold, no time range")
    print(f"{'lookup':<28}{'files asked':>12}{'files read':>11}{'GETs/lookup':>12}{'p99 GETs':>9}{'p50 ms':>8}"
          f"{'p99 ms':>8}")
    for name, row in r["rows"].items():
        print(f"{name:<28}{row['files_asked']:>12.1f}{row['files_read']:>11.3f}{row['gets_mean']:>12.3f}"
              f"{row['gets_p99']:>9.0f}{row['p50_ms']:>8.2f}{row['p99_ms']:>8.2f}")


def _roomy_seaweedfs(work: Path, prefix: str) -> tuple[str, Any]:
    """A SeaweedFS for --scale runs whose number of 1 GiB volumes follows the free disk (`-volume.max=0`), not the
    default 8: a 10^8 history is 3.4 GB of index files, its merges write as much again, and a run keeps every
    history's objects (a run of 10^8 over 1 and 90 days stopped on "no free volumes left")."""
    from storage_tier.seaweedfs_server import SeaweedFS

    class Roomy(SeaweedFS):
        def command(self) -> list[str]:
            return [*super().command(), "-volume.max=0"]

    print("[bench] starting SeaweedFS (10-20 s; volumes as the free disk allows)", file=sys.stderr, flush=True)
    weed = Roomy(work / "weed").start(bucket="mqindex")
    return weed.store_url("mqindex", prefix), weed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.history", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000, help="keyed messages written (default: %(default)s)")
    ap.add_argument("--files", type=int, default=100, help="index files they roll into (default: %(default)s)")
    ap.add_argument("--days", type=float, default=1.0, help="store time the history spans (default: %(default)s)")
    ap.add_argument("--lookups", type=int, default=200, help="lookups of each kind (default: %(default)s)")
    ap.add_argument("--peer-lookups", type=int, default=20,
                    help="lookups of each kind without filters (each reads every file; default: %(default)s)")
    ap.add_argument("--store", default=None, help="store URL (default: a SeaweedFS started for the run)")
    ap.add_argument("--hourly-days", type=int, action="append", default=[],
                    help="days of hourly files, looked up before and after the tier merges (repeatable)")
    ap.add_argument("--per-file", type=int, default=100, help="messages per hourly file (default: %(default)s)")
    ap.add_argument("--scale", type=int, action="append", default=[],
                    help="messages of a history at the service's default file rolls, merged, with the RocketMQ "
                         "layout and PostgreSQL peers (repeatable; bench/history_scales.py)")
    ap.add_argument("--span-days", type=float, action="append", default=[],
                    help="days of store time each --scale history spans (repeatable; default: 1, 30 and 90)")
    ap.add_argument("--pg", default=None, help="PostgreSQL DSN of the B-tree peer (default: the local one; "
                                               "'none' skips it)")
    ap.add_argument("--get-usd-per-1000", type=float, default=0.0004,
                    help="object store price of 1,000 GETs for USD per lookup (default: S3's %(default)s)")
    ap.add_argument("--from-results", action="append", default=[], metavar="JSON",
                    help="print the table and draw the plots of saved --scale runs (history-scales.json; "
                         "repeatable) instead of running; a .md file (docs/BENCHMARKS.md) adds the histories of "
                         "its table to the plots")
    ap.add_argument("--plots", default=None, help="folder for the plots of a --scale run (default: none)")
    ap.add_argument("--filter-cache-bytes", type=int, default=None,
                    help="with --scale: also look up with the filter cache bounded to this many bytes, filters read "
                         "into memory and filters memory-mapped (default: only the service's default bound)")
    ap.add_argument("--filter-files", type=int, default=0,
                    help="only the key filters: this many filter files (bench/history_filters.py)")
    ap.add_argument("--filter-keys", type=int, default=980_000,
                    help="with --filter-files: distinct keys a filter (default: %(default)s, 10^8 over 1 day)")
    args = ap.parse_args(argv)

    if args.from_results:
        from bench.history_scales import report_saved

        return report_saved(args.from_results, args.plots)
    work = Path(tempfile.mkdtemp(prefix="mqindex-bench-history-"))
    if args.filter_files:
        from bench.history_filters import run

        try:
            return run(work, args.filter_files, args.filter_keys, args.filter_cache_bytes or 64 << 20, args.lookups)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    weed = None
    try:
        prefix = f"bench-history-{int(time.time())}"
        if args.scale and args.store is None:  # histories of 10^8 and their merges outgrow 8 volumes of 1 GiB
            store_url, weed = _roomy_seaweedfs(work, prefix)
        else:
            store_url, weed = store_or_seaweedfs(args.store, work, prefix)
        if args.scale:
            from bench.history_scales import run_scales

            return run_scales(work, store_url, weed, args)
        if args.hourly_days:
            results = [_hourly(work, store_url, d, args.per_file, args.lookups) for d in args.hourly_days]
            for r in results:
                _print_hourly(r)
            save_results("history-merged", {"runs": results})
            return 0
        n = args.messages
        t0 = int(time.time() * 1000) - int(args.days * DAY_MS)
        print(f"[bench] writing {n:,} messages into ~{args.files} files over {args.days:g} days", flush=True)
        built = _write(work / "idx", store_url, n, args.files, args.days, t0)
        rng = random.Random(7)
        present = [f"u{i}" for i in rng.sample(range(n), args.lookups * 2) if i % 10][:args.lookups]
        absent = [f"absent-{rng.getrandbits(48)}" for _ in range(args.lookups)]
        rows = {}
        for filters in (True, False):
            for kind, keys in (("present", present), ("absent", absent)):
                rows[(filters, kind)] = _lookups(work / "idx", store_url, keys if filters else keys[:args.peer_lookups],
                                                 filters)
        files = built["files"]
        print(f"\n{n:,} messages, {files} uploaded index files, {args.days:g} days, cold start, no time range")
        print(f"{'lookup':<34}{'GETs/lookup':>12}{'p99 GETs':>10}{'p50 ms':>9}{'p99 ms':>9}")
        for (filters, kind), r in rows.items():
            name = f"mqindex {'with' if filters else 'without'} filters, {kind}"
            print(f"{name:<34}{r['gets_mean']:>12.3f}{r['gets_p99']:>10.0f}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}")
        print(f"{'RocketMQ layout, either':<34}{2 * files:>12.3f}{2 * files:>10}")
        per_msg = (built["index_bytes"] + built["filter_bytes"]) / n
        print(f"\nindex bytes per message {built['index_bytes'] / n:.2f} + filters {built['filter_bytes'] / n:.2f} "
              f"= {per_msg:.2f}; filter memory held after the lookups "
              f"{rows[(True, 'present')]['filter_memory'] / 1e6:.2f} MB; written in {built['write_s']} s")
        save_results("history", {"messages": n, "days": args.days, **built,
                                 "rows": {f"{'with' if f else 'without'}-{k}": v for (f, k), v in rows.items()}})
    finally:
        if weed is not None:
            weed.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
