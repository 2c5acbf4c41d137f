"""`mqindex bench history --scale N --span-days D ...`: key lookups at each scale of history, with their peers.

For each number of messages N and each span of store time D, one history is written through the index service's
real writer, compaction and upload (SeaweedFS), in files of the service's defaults (a file rolls at 1,000,000
items or one hour of store time, whichever comes first), then merged by the service's own tier merges (closed days
into day files, closed weeks into week files), and the service is opened again cold for lookups with no time
range: keys present (unique keys, each in one file) and keys absent. Beside mqindex, in the same run:

- the RocketMQ layout: the same files as written (no merges), 2 GETs per file in range and no filters; its
  latency is modelled from ranged GETs of the same objects timed in the run (each lookup a sum of 2 x files
  GET times drawn from them), since reading thousands of files per lookup would take hours;
- a PostgreSQL B-tree (bench/history_postgres.py): the same messages as rows (key fingerprint, file, position,
  time), loaded with COPY, looked up by fingerprint.

Printed per history: GETs per lookup (average and p99, present and absent), p50/p99 latency, index bytes per
message with filters, local disk and memory for filters and manifests per million keys, and USD per million
lookups at the S3 GET price (`--get-usd-per-1000`, default $0.0004 per 1,000 GETs). CPU seconds of the benchmark
process (writer, compaction, uploads, merges, lookups all run in it) and of SeaweedFS are printed beside each wall
time, with the machine's load average, since the cores are shared.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import percentile, process_cpu_s
from bench.history import DAY_MS, _lookups, _merge, _write, cpu_s

HOUR_MS = 3_600_000
DEFAULT_MAX_ITEMS = 1_000_000  # the service's default roll: 1,000,000 items or one hour


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _du(path: Path, suffix: str | None = None) -> int:
    total = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            if suffix is None or name.endswith(suffix):
                try:
                    total += os.path.getsize(os.path.join(root, name))
                except OSError:
                    pass
    return total


def _get_times(store_url: str, samples: int = 300) -> list[float]:
    """Seconds of single ranged GETs (a 4-byte slot read, a 20-byte item read, as the RocketMQ layout makes) of the
    uploaded index objects, for the RocketMQ layout's modelled latency."""
    from storage_tier import open_store

    store = open_store(store_url)
    try:
        keys = [k for k in store.list("") if not k.endswith(".filter")]
        sizes = {k: store.size(k) for k in keys[:50]}
        rng = random.Random(3)
        out = []
        for i in range(samples):
            k = rng.choice(list(sizes))
            start = rng.randrange(max(1, sizes[k] - 20))
            t = time.perf_counter()
            store.get(k, start, start + (4 if i % 2 == 0 else 20))
            out.append(time.perf_counter() - t)
        return out
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            close()


def _modelled(get_times: list[float], gets: int, lookups: int = 200) -> tuple[float, float]:
    """p50/p99 seconds of lookups each making `gets` GETs one after another, each GET's time drawn from those
    measured."""
    rng = np.random.default_rng(5)
    arr = np.asarray(get_times)
    sums = [float(arr[rng.integers(0, len(arr), gets)].sum()) for _ in range(lookups)]
    return percentile(sums, 50), percentile(sums, 99)


def geometry(n: int, days: float) -> tuple[int, int]:
    """(files, messages per file) as the service's defaults roll them: one file an hour, or per 1,000,000 items when
    an hour holds more."""
    hours = max(1, round(days * 24))
    per_file = min(DEFAULT_MAX_ITEMS, -(-n // hours))
    return -(-n // per_file), per_file


def run_one(work: Path, store_url: str, weed_pid: int | None, n: int, days: float, lookups: int,
            pg: Any | None, usd_per_get: float, filter_cache_bytes: int | None = None) -> dict[str, Any]:
    """One history: written, looked up as written, merged, looked up cold; with its RocketMQ and PostgreSQL
    figures."""
    files, per_file = geometry(n, days)
    now = int(time.time() * 1000)
    t0 = now - int(days * DAY_MS) - 2 * HOUR_MS
    idx = work / f"idx-{n}-{days:g}d"
    base, sep, query = store_url.partition("?")
    url = f"{base.rstrip('/')}-{n}-{days:g}d{sep}{query}"  # each history under its own prefix
    weed0 = process_cpu_s(weed_pid) if weed_pid else 0.0
    print(f"[bench] {n:,} messages over {days:g} days: {files:,} files of {per_file:,} (load {load()})", flush=True)
    built = _write(idx, url, n, files, days, t0)
    print(f"[bench]   written in {built['write_s']} s, {built['write_cpu_s']} CPU s "
          f"({built['write_rate']:,} messages/s; load {load()})", flush=True)
    rng = random.Random(n + int(days))
    present = [f"u{i}" for i in rng.sample(range(n), lookups * 2) if i % 10][:lookups]
    absent = [f"absent-{rng.getrandbits(48)}" for _ in range(lookups)]
    merged = _merge(idx, url, now)
    print(f"[bench]   {merged['merges']} merges in {merged['merge_s']} s, {merged['merge_cpu_s']} CPU s -> "
          f"{merged['files']} files (load {load()})",
          flush=True)
    cpu0, t = cpu_s(), time.perf_counter()
    rows = {kind: _lookups(idx, url, keys, True) for kind, keys in (("present", present), ("absent", absent))}
    lookup_cpu = cpu_s() - cpu0
    lookup_wall = time.perf_counter() - t
    bounded = {}
    if filter_cache_bytes is not None:  # the filters outgrow the bound: read again, or mapped again, when evicted
        for mode, mapped in (("read", False), ("mapped", True)):
            bounded[mode] = {kind: _lookups(idx, url, keys, True, filter_cache_bytes, mapped)
                             for kind, keys in (("present", present), ("absent", absent))}
    get_times = _get_times(url, samples=min(300, max(40, 2 * lookups)))
    rmq_gets = 2 * built["files"]
    rmq_p50, rmq_p99 = _modelled(get_times, rmq_gets)
    local = {"filters": _du(idx, ".filter"), "all": _du(idx)}
    out: dict[str, Any] = {
        "messages": n, "days": days, "files_written": built["files"], "per_file": per_file, **built, **merged,
        "rows": rows, "lookups": lookups, "lookup_cpu_ms": 1e3 * lookup_cpu / (2 * lookups),
        "lookup_wall_s": round(lookup_wall, 1), "local_bytes": local,
        "get_ms_p50": 1e3 * percentile(get_times, 50), "get_ms_p99": 1e3 * percentile(get_times, 99),
        "rocketmq": {"gets": rmq_gets, "p50_ms": rmq_p50 * 1e3, "p99_ms": rmq_p99 * 1e3},
        "usd_per_get": usd_per_get, "seaweedfs_cpu_s": round(process_cpu_s(weed_pid) - weed0, 1) if weed_pid else None,
        "load_after": load(),
    }
    if bounded:
        out["bounded"] = {"filter_cache_bytes": filter_cache_bytes, **bounded}
    if pg is not None:
        out["postgresql"] = pg(n, days, per_file, t0, present, absent)
    shutil.rmtree(idx, ignore_errors=True)
    return out


def print_one(r: dict[str, Any]) -> None:
    n, usd = r["messages"], r["usd_per_get"] * 1e6
    per_m = n / 1e6
    mq_bytes = (r["index_bytes"] + r["filter_bytes"]) / n
    print(f"\n{n:,} messages over {r['days']:g} days: {r['files_written']:,} files written ({r['per_file']:,} "
          f"messages each), {r['files']:,} after {r['merges']} merges; cold, no time range, "
          f"{r['lookups']} lookups of each kind")
    print(f"  written {r['write_s']} s ({r['write_cpu_s']} CPU s, {r['write_rate']:,} messages/s, "
          f"{1e6 * r['write_cpu_s'] / n:.2f} CPU us/message); merged {r['merge_s']} s ({r['merge_cpu_s']} CPU s); "
          f"lookups "
          f"{r['lookup_cpu_ms']:.2f} CPU ms each; SeaweedFS {r['seaweedfs_cpu_s']} CPU s; load after {r['load_after']}")
    head = f"  {'peer':<22}{'kind':<9}{'GETs avg':>9}{'GETs p99':>9}{'p50 ms':>9}{'p99 ms':>9}{'USD/1M':>9}"
    print(head)
    for kind in ("present", "absent"):
        row = r["rows"][kind]
        print(f"  {'mqindex':<22}{kind:<9}{row['gets_mean']:>9.3f}{row['gets_p99']:>9.0f}{row['p50_ms']:>9.2f}"
              f"{row['p99_ms']:>9.2f}{row['gets_mean'] * usd:>9.2f}")
    rm = r["rocketmq"]
    print(f"  {'RocketMQ layout*':<22}{'either':<9}{rm['gets']:>9,}{rm['gets']:>9,}{rm['p50_ms']:>9.0f}"
          f"{rm['p99_ms']:>9.0f}{rm['gets'] * usd:>9.2f}")
    pg = r.get("postgresql")
    if pg:
        for kind in ("present", "absent"):
            print(f"  {'PostgreSQL B-tree':<22}{kind:<9}{0:>9}{0:>9}{pg[kind]['p50_ms']:>9.3f}"
                  f"{pg[kind]['p99_ms']:>9.3f}{0:>9.2f}")
    print(f"  * modelled: 2 x {r['files_written']:,} GETs one after another, each timed from ranged GETs of the same "
          f"objects (p50 {r['get_ms_p50']:.2f} ms, p99 {r['get_ms_p99']:.2f} ms)")
    loc, held = r["local_bytes"], r["rows"]["present"]["filter_memory"]
    print(f"  index bytes/message: mqindex {r['index_bytes'] / n:.2f} + filters {r['filter_bytes'] / n:.2f} = "
          f"{mq_bytes:.2f} as written; merged {r['merged_index_bytes'] / n:.2f} + {r['merged_filter_bytes'] / n:.2f} = "
          f"{(r['merged_index_bytes'] + r['merged_filter_bytes']) / n:.2f}"
          + (f"; PostgreSQL {pg['total_bytes'] / n:.2f} (table {pg['table_bytes'] / n:.2f}, B-tree "
             f"{pg['index_bytes'] / n:.2f})" if pg else ""))
    print(f"  per million keys: mqindex local disk {loc['all'] / per_m / 1e6:.2f} MB (filters "
          f"{loc['filters'] / per_m / 1e6:.2f} MB, manifests and the rest "
          f"{(loc['all'] - loc['filters']) / per_m / 1e6:.2f} MB), filter memory held "
          f"{held / per_m / 1e6:.2f} MB"
          + (f"; PostgreSQL disk {pg['total_bytes'] / per_m / 1e6:.2f} MB, shared_buffers {pg['shared_buffers']}"
             if pg else ""))
    if pg:
        print(f"  PostgreSQL: COPY {pg['copy_s']} s, B-tree built {pg['index_s']} s ({pg['rows_per_s']:,} rows/s "
              f"loaded); lookups {pg['cpu_ms']:.3f} client CPU ms each")
    print(f"  USD per million lookups at ${r['usd_per_get'] * 1000:.4f} per 1,000 GETs (S3 GET price)", flush=True)
    b = r.get("bounded")
    if b:
        print(f"  filter cache bounded to {b['filter_cache_bytes']:,} bytes (filters {r['merged_filter_bytes']:,} "
              f"bytes after the merges): lookups with evicted filters read again or mapped again")
        print(f"  {'filters':<10}{'kind':<9}{'GETs avg':>9}{'p50 ms':>9}{'p99 ms':>9}{'CPU ms':>9}{'held MB':>9}")
        default = r["rows"]
        for mode, rows in (("unbounded", default), ("read", b["read"]), ("mapped", b["mapped"])):
            for kind in ("present", "absent"):
                row = rows[kind]
                print(f"  {mode:<10}{kind:<9}{row['gets_mean']:>9.3f}{row['p50_ms']:>9.2f}{row['p99_ms']:>9.2f}"
                      f"{row.get('cpu_ms', float('nan')):>9.2f}{row['filter_memory'] / 1e6:>9.2f}")
        print("  (unbounded: the service's default bound, which holds every filter of this history)", flush=True)


def run_scales(work: Path, store_url: str, weed: Any, args: Any) -> int:
    """Every --scale x --span-days history in turn, printed as each finishes; the raw figures saved after each (a
    run stopped part way keeps what it measured), the table and plots at the end."""
    from bench.common import save_results
    from bench.history_plots import markdown, plot
    from bench.history_postgres import PG_DEFAULT, PostgresPeer

    spans = args.span_days or [1.0, 30.0, 90.0]
    pg = None if args.pg == "none" else PostgresPeer(args.pg or os.environ.get("MQINDEX_TEST_PG", PG_DEFAULT))
    weed_pid = weed.proc.pid if weed is not None else None
    results: list[dict[str, Any]] = []
    print(f"[bench] {os.cpu_count()} cores, load {load()}; S3 GET price ${args.get_usd_per_1000} per 1,000",
          flush=True)
    try:
        for n in args.scale:
            for days in spans:
                r = run_one(work, store_url, weed_pid, n, days, args.lookups, pg, args.get_usd_per_1000 / 1000,
                            getattr(args, "filter_cache_bytes", None))
                print_one(r)
                results.append(r)
                save_results("history-scales", {"runs": results})
    finally:
        if pg is not None:
            pg.close()
    print("\n" + markdown(results))
    if args.plots:
        for path in plot(results, Path(args.plots)):
            print(f"[bench] plot {path}")
    return 0


def report_saved(paths: list[str], plots: str | None) -> int:
    """The table and plots of runs saved by earlier --scale runs (each file's "runs"), in one. A Markdown file
    (docs/BENCHMARKS.md) adds the histories of its table to the plots only (a history also in a saved run is
    taken from the run)."""
    import json

    from bench.history_plots import from_table, markdown, plot

    results = [r for p in paths if not p.endswith(".md") for r in json.loads(Path(p).read_text())["runs"]]
    for r in results:
        print_one(r)
    print("\n" + markdown(results))
    have = {(r["messages"], r["days"]) for r in results}
    tabled = [r for p in paths if p.endswith(".md") for r in from_table(Path(p).read_text())
              if (r["messages"], r["days"]) not in have]
    if plots:
        for path in plot(results + tabled, Path(plots)):
            print(f"[bench] plot {path}")
    return 0
