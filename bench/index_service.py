"""Index service benchmark: sustained put rate through IndexService while its background thread is
busy rolling, compacting and uploading, next to RocksDB (rocksdict WriteBatch) on the same records
in the same run; then query latency p50/p99 and GETs per query for keys in WRITING, COMPACTED and
UPLOADED files (uploaded to SeaweedFS S3 unless --store is given), next to a RocksDB prefix seek.

Run: `mqindex bench index_service` or
`python -m bench.index_service [--records N] [--queries N] [--repeat R] [--writes-only]`.
"""

from __future__ import annotations

import argparse
import random
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import emit, percentile, progress, save_results, store_or_seaweedfs, table
from index_service import FileState, IndexService

TOPIC = "bench"


def make_records(n: int, t0: int, queues: int) -> list[tuple[str, int, int, int, int, list[str]]]:
    return [(TOPIC, i % queues, i // queues, 256, t0 + i // 100, [f"order-{i}"]) for i in range(n)]


def put_through_service(svc: IndexService, records: list[Any], chunk: int) -> tuple[float, float]:
    """records/s (wall) and records per CPU second of the process (writer and background threads included)."""
    started, cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(records), chunk):
        svc.put_batch(records[i:i + chunk])
        if (i // chunk) % 20 == 0:
            progress("service put_batch", i + chunk, len(records), started)
    svc.flush(None)
    return len(records) / (time.perf_counter() - started), len(records) / (time.process_time() - cpu)


def put_one_by_one(svc: IndexService, records: list[Any]) -> float:
    started = time.perf_counter()
    put = svc.put
    for topic, q, off, size, t, keys in records:
        put(topic, q, off, size, keys, t)
    svc.flush(None)
    return len(records) / (time.perf_counter() - started)


def rocksdb_put(path: Path, records: list[Any], chunk: int) -> tuple[Any, float, float]:
    """The database, records/s (wall) and records per CPU second of the process (RocksDB's threads included)."""
    from rocksdict import Rdict, WriteBatch

    started, cpu = time.perf_counter(), time.process_time()
    db = Rdict(str(path))
    pack_k = struct.Struct(">qq").pack
    pack_v = struct.Struct(">iii").pack
    for i in range(0, len(records), chunk):
        wb = WriteBatch(raw_mode=False)
        for topic, q, off, size, t, keys in records[i:i + chunk]:
            for k in keys:
                wb.put(f"{topic}#{k}".encode() + pack_k(t, off), pack_v(q, size, 0))
        db.write(wb)
        if (i // chunk) % 20 == 0:
            progress("rocksdb WriteBatch", i + chunk, len(records), started)
    db.flush()
    return db, len(records) / (time.perf_counter() - started), len(records) / (time.process_time() - cpu)


def rocksdb_lookup(db: Any, keys: list[str]) -> list[float]:
    lat = []
    for k in keys:
        prefix = f"{TOPIC}#{k}".encode()
        t = time.perf_counter()
        it = db.iter()
        it.seek(prefix)
        found = []
        while it.valid() and bytes(it.key()).startswith(prefix):
            found.append(it.value())
            it.next()
        lat.append(time.perf_counter() - t)
        assert found, k
    return lat


def query_latency(svc: IndexService, keys: list[tuple[str, int]], store: Any, window_ms: int | None
                  ) -> tuple[list[float], list[int]]:
    """Latency and GETs of each query; with window_ms, the query's range is the key's store time
    +- window_ms (a user who knows roughly when), else the whole retention."""
    lat, gets = [], []
    for k, t_ms in keys:
        lo, hi = (t_ms - window_ms, t_ms + window_ms) if window_ms is not None else (0, None)
        g0 = store.meter.snapshot()["GET"] if store is not None else 0
        t = time.perf_counter()
        hits = svc.query(TOPIC, k, 10, lo, hi)
        lat.append(time.perf_counter() - t)
        gets.append((store.meter.snapshot()["GET"] - g0) if store is not None else 0)
        assert len(hits) == 1 and hits[0].key == k, (k, hits)
    return lat, gets


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.index_service", description=__doc__)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--queues", type=int, default=16)
    ap.add_argument("--max-items", type=int, default=250_000, help="items per file (rolls during the put run)")
    ap.add_argument("--slots", type=int, default=65_536)
    ap.add_argument("--chunk", type=int, default=10_000, help="records per put_batch / WriteBatch")
    ap.add_argument("--queries", type=int, default=300, help="queries per file state")
    ap.add_argument("--repeat", type=int, default=1,
                    help="put runs, the service and RocksDB alternately; the best of each is reported")
    ap.add_argument("--writes-only", action="store_true", help="stop after the write table")
    ap.add_argument("--store", default=None, help="store URL (default: a SeaweedFS started for the run)")
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="mqindex-bench-svc-"))
    weed = None
    try:
        store_url, weed = store_or_seaweedfs(args.store, work, "bench-index")
        t0 = int(time.time() * 1000)
        n = args.records
        records = make_records(n, t0, args.queues)
        cfg = {"slots": args.slots, "max_items": args.max_items, "maintain_interval_s": 0.2}

        # 1. sustained put rate, background rolling/compacting/uploading meanwhile; the service and RocksDB
        # alternately, --repeat times (fresh folders each time), best of each
        svc_rate = rocks_rate = svc_cpu = rocks_cpu = 0.0
        svc: Any = None
        db: Any = None
        for rep in range(args.repeat):
            if rep:
                svc.close()
                db.close()
                shutil.rmtree(work / "idx")
                shutil.rmtree(work / "rocksdb")
            # each run under its own remote prefix: a run's orphan sweep at start would otherwise delete the
            # previous run's uploads inside the timed put (work the peer does not do, and no service in steady
            # state meets)
            prefix = f"index-run{rep}/"
            svc = IndexService.open(work / "idx", store=store_url, remote_prefix=prefix, **cfg)
            rate, cpu_rate = put_through_service(svc, records, args.chunk)
            bg_busy = sum(1 for f in svc.files() if f.state is not FileState.WRITING)
            db, r_rate, r_cpu = rocksdb_put(work / "rocksdb", records, args.chunk)
            print(f"[bench] run {rep + 1}/{args.repeat}: service {rate:,.0f} records/s ({bg_busy} files sealed "
                  f"during the run), rocksdb {r_rate:,.0f}/s, ratio {rate / r_rate:.2f}; per CPU second: service "
                  f"{cpu_rate:,.0f}, rocksdb {r_cpu:,.0f}, ratio {cpu_rate / r_cpu:.2f}", file=sys.stderr, flush=True)
            svc_rate, rocks_rate = max(svc_rate, rate), max(rocks_rate, r_rate)
            svc_cpu, rocks_cpu = max(svc_cpu, cpu_rate), max(rocks_cpu, r_cpu)
        if args.writes_only:
            svc.close()
            db.close()
            emit(table(f"Index write: records/s into the index (1 key per record; best of {args.repeat} "
                       "alternating runs)", ["writer", "records/s", "ratio vs RocksDB", "records per CPU second",
                                             "ratio (CPU)"],
                       [["IndexService.put_batch (background busy)", svc_rate, svc_rate / rocks_rate, svc_cpu,
                         svc_cpu / rocks_cpu],
                        ["RocksDB WriteBatch (rocksdict)", rocks_rate, 1.0, rocks_cpu, 1.0]]))
            return 0
        more = make_records(n // 5, t0 + n, args.queues)
        more = [(tp, q, off + n, s, t, [k[0] + "-single"]) for tp, q, off, s, t, k in more]
        single_rate = put_one_by_one(svc, more)
        svc.roll()
        svc.maintain()
        svc.close()
        emit(table(f"Index write: records/s into the index (1 key per record; best of {args.repeat} alternating "
                   "runs)",
                   ["writer", "records/s", "ratio vs RocksDB"],
                   [["IndexService.put_batch (background busy)", svc_rate, svc_rate / rocks_rate],
                    ["IndexService.put (one call per record)", single_rate, single_rate / rocks_rate],
                    ["RocksDB WriteBatch (rocksdict)", rocks_rate, 1.0]]))

        # 2. query latency per state; reopened with the background on demand so the states hold still
        svc = IndexService.open(work / "idx", store=store_url, remote_prefix=prefix, slots=args.slots,
                                max_items=args.max_items,
                                maintain_interval_s=0)
        store = svc.store
        base = n + n // 5
        comp = [(TOPIC, i % args.queues, base + i, 256, t0 + base + i, [f"comp-{i}"]) for i in range(50_000)]
        svc.put_batch(comp)
        svc.flush(None)
        svc.roll()
        for mf in svc.files_map.by_state(FileState.SEALED):
            svc.lifecycle.compact(mf)
        hot = [(TOPIC, i % args.queues, base + 50_000 + i, 256, t0 + base + 50_000 + i, [f"hot-{i}"])
               for i in range(50_000)]
        svc.put_batch(hot)
        svc.flush(None)
        states = sorted({f.state.value for f in svc.files() if f.items})
        rng = random.Random(1)
        q = args.queries
        picks = {"WRITING": hot, "COMPACTED": comp, "UPLOADED": records}
        sample = {state: [(r[5][0], r[4]) for r in rng.sample(recs, q)] for state, recs in picks.items()}
        rows = []
        results: dict[str, Any] = {"records": n, "put_rate": svc_rate, "put_one_rate": single_rate,
                                   "rocksdb_put_rate": rocks_rate, "states": states, "store": store_url.split("?")[0]}
        files_n = len([f for f in svc.files() if f.items])
        for window, label in ((1000, "range = store time +- 1 s"), (None, f"no range: all {files_n} files overlap")):
            for state, keys in sample.items():
                started = time.perf_counter()
                lat, gets = query_latency(svc, keys, store, window)
                rows.append([f"key in {state} file, {label}", percentile(lat, 50) * 1e3, percentile(lat, 99) * 1e3,
                             sum(gets) / len(gets), max(gets)])
                results[f"query_{state}_{'window' if window else 'all'}"] = {
                    "p50_ms": percentile(lat, 50) * 1e3, "p99_ms": percentile(lat, 99) * 1e3,
                    "gets_mean": sum(gets) / len(gets), "gets_max": max(gets)}
                progress(f"queries {state} ({label})", len(keys), len(keys), started)
        rlat = rocksdb_lookup(db, [k for k, _t in sample["UPLOADED"]])
        rows.append(["RocksDB prefix seek (local)", percentile(rlat, 50) * 1e3, percentile(rlat, 99) * 1e3, 0, 0])
        results["rocksdb_lookup"] = {"p50_ms": percentile(rlat, 50) * 1e3, "p99_ms": percentile(rlat, 99) * 1e3}
        svc.close()
        db.close()
        emit(table(f"Query latency (max_count=10, one hit), store {store_url.split('?')[0]}",
                   ["lookup", "p50 ms", "p99 ms", "GETs/query (mean)", "GETs/query (max)"], rows))
        path = save_results("index_service", results)
        print(f"[bench] results saved to {path}", file=sys.stderr)
        return 0
    finally:
        if weed is not None:
            weed.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
