"""Index file benchmark: the native formats against RocksDB and SQLite on the same records, and the
uploaded compacted files on SeaweedFS.

One run, one set of N (key -> location) records with realistic keys (order ids and UUIDs):
- write rate into a native unsealed file (put_batch) vs RocksDB (rocksdict WriteBatch) vs SQLite
  (indexed table, executemany), goal >= 2x RocksDB;
- hot lookups/s on the unsealed and the compacted native file vs RocksDB get, goal >= 1x;
- compaction items/s (goal >= 5 M/s) and its peak memory against the file size (goal <= 1.2x);
- ranged GETs per lookup on uploaded compacted files (native: 1, RocketMQ layout: 2), counted by
  the store's meter, with lookup latency p50/p99.

Usage: python -m bench.index_file [--records N] [--lookups L] [--remote-lookups R] [--repeat R] [--writes-only]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import struct
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import emit, percentile, progress, save_results, table

BEGIN = 1_700_000_000_000
BATCH = 10_000
TOPICS = ("orders", "payments")
_LOC = struct.Struct("<iqiq")


def make_records(n: int, seed: int = 42) -> list[tuple[str, int, int, int, int, str]]:
    """n records (topic, queue_id, offset, size, store_time_ms, key): half order ids, half UUIDs,
    every key distinct, store times rising ~1000 records per ms as a busy broker's would."""
    rng = np.random.default_rng(seed)
    half = n // 2
    order_nums = rng.choice(10 ** 12, size=half, replace=False)
    raw = rng.integers(0, 256, size=(n - half) * 16, dtype=np.uint8).tobytes().hex()
    sizes = rng.integers(200, 4096, size=n).tolist()
    out: list[tuple[str, int, int, int, int, str]] = []
    for i in range(n):
        if i < half:
            key = f"ORD-{2024 + i % 3}-{int(order_nums[i]):012d}"
        else:
            h = raw[(i - half) * 32:(i - half + 1) * 32]
            key = f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"
        out.append((TOPICS[i & 1], i % 16, i // 16, sizes[i], BEGIN + i // 1000, key))
    rng2 = random.Random(seed)
    rng2.shuffle(out)  # keys arrive interleaved, not grouped by kind
    return out


def _progress_every(what: str, done: int, total: int, started: float, step: int) -> None:
    if done % step < BATCH or done == total:
        progress(what, done, total, started)


def bench_native_write(path: Path, recs: list[Any], slots: int) -> tuple[float, float, Any]:
    """Wall seconds, CPU seconds of the process (every thread) and the open writer."""
    from index_file import NativeIndexWriter

    n = len(recs)
    t0, c0 = time.perf_counter(), time.process_time()
    w = NativeIndexWriter.create(path, BEGIN, slots=slots, max_items=n)  # a fixed cost the writer pays
    for i in range(0, n, BATCH):
        assert w.put_batch(recs[i:i + BATCH]) == min(BATCH, n - i)
        _progress_every("native put_batch", i + BATCH, n, t0, 1_000_000)
    return time.perf_counter() - t0, time.process_time() - c0, w


def bench_rocksdb_write(path: Path, recs: list[Any]) -> tuple[float, float, Any]:
    """Wall seconds, CPU seconds of the process (RocksDB's own threads included) and the open database."""
    from rocksdict import Options, Rdict, WriteBatch

    n = len(recs)
    pack = _LOC.pack
    t0, c0 = time.perf_counter(), time.process_time()
    db = Rdict(str(path), Options(raw_mode=True))
    for i in range(0, n, BATCH):
        wb = WriteBatch(raw_mode=True)
        for topic, q, off, size, t, key in recs[i:i + BATCH]:
            wb.put(f"{topic}#{key}".encode(), pack(q, off, size, t))
        db.write(wb)
        _progress_every("rocksdb WriteBatch", i + BATCH, n, t0, 1_000_000)
    return time.perf_counter() - t0, time.process_time() - c0, db


def bench_sqlite_write(path: Path, recs: list[Any]) -> tuple[float, sqlite3.Connection]:
    db = sqlite3.connect(str(path))
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE idx (k TEXT NOT NULL, queue INTEGER, off INTEGER, size INTEGER, t INTEGER)")
    db.execute("CREATE INDEX idx_k ON idx (k)")
    n = len(recs)
    t0 = time.perf_counter()
    for i in range(0, n, BATCH):
        with db:
            db.executemany("INSERT INTO idx VALUES (?, ?, ?, ?, ?)",
                           [(f"{topic}#{key}", q, off, size, t) for topic, q, off, size, t, key in recs[i:i + BATCH]])
        _progress_every("sqlite executemany", i + BATCH, n, t0, 1_000_000)
    return time.perf_counter() - t0, db


def timed_lookups(name: str, fn: Any, probes: list[tuple[str, str]]) -> float:
    t0 = time.perf_counter()
    for topic, key in probes:
        fn(topic, key)
    rate = len(probes) / (time.perf_counter() - t0)
    print(f"[bench] {name}: {len(probes):,} lookups, {rate:,.0f}/s", file=sys.stderr, flush=True)
    return rate


class AnonPeak:
    """Samples the process's anonymous resident memory (RssAnon) to find the peak of a phase."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def now() -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
        return 0

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.now())
            self._stop.wait(0.005)

    def __enter__(self) -> AnonPeak:
        self.base = self.now()
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, self.now())


def build_rocketmq_compacted(d: Path, recs: list[Any]) -> Path:
    from index_file import RocketMQIndexWriter, compact_rocketmq

    n = len(recs)
    slots = max(1, n // 4)  # RocketMQ's default ratio: 5 M slots for 20 M items
    w = RocketMQIndexWriter.create(d / "rocketmq.idx", BEGIN, slots=slots, max_items=n + 1)
    t0 = time.perf_counter()
    for i in range(0, n, BATCH):
        w.put_batch([(topic, q, off, size, t, key) for topic, q, off, size, t, key in recs[i:i + BATCH]])
        _progress_every("rocketmq put (for the remote test)", i + BATCH, n, t0, 200_000)
    w.seal()
    w.close()
    compact_rocketmq(d / "rocketmq.idx", d / "rocketmq.cidx", slot_count=slots)
    os.unlink(d / "rocketmq.idx")
    return d / "rocketmq.cidx"


def remote_lookups(store: Any, reader: Any, probes: list[tuple[str, str]]) -> tuple[float, float, float, int]:
    lat: list[float] = []
    before = store.meter.snapshot()
    found = 0
    for topic, key in probes:
        t0 = time.perf_counter()
        hits = reader.query(topic, key, 64)
        lat.append((time.perf_counter() - t0) * 1000)
        found += len(hits) > 0
    used = store.meter.snapshot() - before
    return used["GET"] / len(probes), percentile(lat, 50), percentile(lat, 99), found


def upload(store: Any, key: str, path: Path) -> None:
    part = 64 * 1024 * 1024
    with store.multipart(key) as w, open(path, "rb") as f:
        while chunk := f.read(part):
            w.write_part(chunk)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="bench.index_file", description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=5_000_000, help="records N (default 5,000,000)")
    ap.add_argument("--lookups", type=int, default=200_000, help="hot lookups per engine (default 200,000)")
    ap.add_argument("--remote-lookups", type=int, default=300, help="lookups on SeaweedFS per layout (default 300)")
    ap.add_argument("--rocketmq-records", type=int, default=500_000,
                    help="records in the RocketMQ-layout file for the GET count (its writer is per-item "
                         "Python; the count of GETs does not depend on the size) (default 500,000)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="write runs, native and RocksDB alternately; the best of each is reported (default 1)")
    ap.add_argument("--writes-only", action="store_true", help="stop after the write table")
    ap.add_argument("--skip-sqlite", action="store_true", help="with --writes-only: leave SQLite out (slow at 5 M)")
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir, removed at the end)")
    args = ap.parse_args(argv)
    if args.skip_sqlite and not args.writes_only:
        ap.error("--skip-sqlite needs --writes-only (the lookups compare against SQLite too)")
    n = args.records
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="mqindex-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"records": n}
    try:
        print(f"[bench] generating {n:,} records", file=sys.stderr, flush=True)
        recs = make_records(n)
        rng = random.Random(7)
        probes = [(r[0], r[5]) for r in rng.sample(recs, min(args.lookups, n))]

        # -- writes: native and RocksDB alternately, --repeat times, best of each --------------------
        t_native = t_rocks = cpu_native = cpu_rocks = float("inf")
        writer: Any = None
        rocks: Any = None
        for rep in range(args.repeat):
            if rep:
                writer.close()
                rocks.close()
                os.unlink(work / "native.idx")
                shutil.rmtree(work / "rocksdb")
            t, c, writer = bench_native_write(work / "native.idx", recs, slots=n)
            t2, c2, rocks = bench_rocksdb_write(work / "rocksdb", recs)
            print(f"[bench] write run {rep + 1}/{args.repeat}: native {n / t:,.0f}/s, rocksdb {n / t2:,.0f}/s, "
                  f"ratio {t2 / t:.2f}; per CPU second: native {n / c:,.0f}, rocksdb {n / c2:,.0f}, ratio "
                  f"{c2 / c:.2f}", file=sys.stderr, flush=True)
            t_native, t_rocks = min(t_native, t), min(t_rocks, t2)
            cpu_native, cpu_rocks = min(cpu_native, c), min(cpu_rocks, c2)
        t_sqlite, sql = bench_sqlite_write(work / "sqlite.db", recs) if not args.skip_sqlite else (float("nan"), None)
        w_native, w_rocks, w_sqlite = n / t_native, n / t_rocks, n / t_sqlite
        c_native, c_rocks = n / cpu_native, n / cpu_rocks
        results["write"] = {"native": w_native, "rocksdb": w_rocks, "sqlite": w_sqlite, "repeat": args.repeat,
                            "native_per_cpu_s": c_native, "rocksdb_per_cpu_s": c_rocks}
        write_table = table(f"Index write, {n:,} records (batches of {BATCH:,}; best of {args.repeat} "
                            "alternating runs; file/database creation included)",
                            ["engine", "records/s", "vs RocksDB", "records per CPU second", "vs RocksDB (CPU)"], [
            ["native unsealed put_batch", w_native, w_native / w_rocks, c_native, c_native / c_rocks],
            ["RocksDB WriteBatch (rocksdict)", w_rocks, 1.0, c_rocks, 1.0],
        ] + ([] if args.skip_sqlite else [["SQLite indexed table (one run)", w_sqlite, w_sqlite / w_rocks, "-", "-"]]))
        if args.writes_only:
            emit(write_table)
            writer.close()
            rocks.close()
            if sql is not None:
                sql.close()
            save_results("index_file_writes", results)
            return 0

        # -- hot lookups -------------------------------------------------------------------------
        unpack = _LOC.unpack
        rget = rocks.get

        def rocks_lookup(topic: str, key: str) -> Any:
            v = rget(f"{topic}#{key}".encode())
            return unpack(v) if v is not None else None

        def sqlite_lookup(topic: str, key: str) -> Any:
            return sql.execute("SELECT queue, off, size, t FROM idx WHERE k = ?", (f"{topic}#{key}",)).fetchall()

        for topic, key in probes[:1000]:  # every engine answers every probe with the record
            assert len(writer.query(topic, key, 64)) == 1 and rocks_lookup(topic, key) is not None
        l_unsealed = timed_lookups("native unsealed query", writer.query, probes)
        l_rocks = timed_lookups("rocksdb get", rocks_lookup, probes)
        l_sqlite = timed_lookups("sqlite select", sqlite_lookup, probes[: max(1, len(probes) // 4)])

        # -- seal + compaction -------------------------------------------------------------------
        from index_file import CompactedIndexReader, RemoteCompactedIndexReader, compact, open_remote_rocketmq

        writer.seal()
        writer.close()
        src_size = os.path.getsize(work / "native.idx")
        print("[bench] compacting", file=sys.stderr, flush=True)
        tracemalloc.start()
        with AnonPeak() as mem:
            stats = compact(work / "native.idx", work / "native.cidx")
        _cur, heap_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        anon_peak = mem.peak - mem.base
        c_rate = stats.items / stats.seconds
        results["compaction"] = {"items_per_s": c_rate, "seconds": stats.seconds, "source_bytes": src_size,
                                 "compacted_bytes": stats.bytes, "heap_peak": heap_peak, "anon_peak": anon_peak}
        creader = CompactedIndexReader(work / "native.cidx")
        for topic, key in probes[:1000]:
            assert len(creader.query(topic, key, 64)) == 1
        l_compacted = timed_lookups("native compacted query", creader.query, probes)
        results["lookup"] = {"native_unsealed": l_unsealed, "native_compacted": l_compacted, "rocksdb": l_rocks,
                             "sqlite": l_sqlite}
        rocks.close()
        sql.close()

        # -- remote: uploaded compacted files on SeaweedFS ---------------------------------------
        from storage_tier import open_store
        from storage_tier.seaweedfs_server import SeaweedFS

        rmq_n = min(args.rocketmq_records, n)
        rmq_path = build_rocketmq_compacted(work, recs[:rmq_n])
        print("[bench] starting SeaweedFS", file=sys.stderr, flush=True)
        server = SeaweedFS(work / "seaweedfs").start(bucket="mqindex")
        try:
            store = open_store(server.store_url("mqindex", "bench"))
            print("[bench] uploading the compacted files", file=sys.stderr, flush=True)
            upload(store, "native.cidx", work / "native.cidx")
            upload(store, "rocketmq.cidx", rmq_path)
            remote = RemoteCompactedIndexReader(store, "native.cidx")
            rprobes = rng.sample(probes, min(args.remote_lookups, len(probes)))
            g_native, p50_n, p99_n, found_n = remote_lookups(store, remote, rprobes)
            rmq = open_remote_rocketmq(store, "rocketmq.cidx")
            rmq_probes = [(r[0], r[5]) for r in rng.sample(recs[:rmq_n], min(args.remote_lookups, rmq_n))]
            g_rmq, p50_r, p99_r, found_r = remote_lookups(store, rmq, rmq_probes)
            assert found_n == len(rprobes) and found_r == len(rmq_probes)
            store.close()
        finally:
            server.stop()
        results["remote"] = {"native": {"gets_per_lookup": g_native, "p50_ms": p50_n, "p99_ms": p99_n},
                             "rocketmq": {"gets_per_lookup": g_rmq, "p50_ms": p50_r, "p99_ms": p99_r,
                                          "records": rmq_n}}

        # -- report ------------------------------------------------------------------------------
        emit(write_table)
        emit(table(f"Hot lookups, {len(probes):,} random existing keys", ["engine", "lookups/s", "vs RocksDB get"], [
            ["native unsealed query", l_unsealed, l_unsealed / l_rocks],
            ["native compacted query (mmap)", l_compacted, l_compacted / l_rocks],
            ["RocksDB get", l_rocks, 1.0],
            ["SQLite SELECT (1/4 of the probes)", l_sqlite, l_sqlite / l_rocks],
        ]))
        emit(table("Compaction", ["items", "seconds", "items/s", "goal items/s", "source file", "compacted file",
                                  "peak anon RSS", "peak numpy heap", "peak / source"], [
            [stats.items, stats.seconds, c_rate, 5_000_000.0, f"{src_size / 2**20:,.0f} MiB",
             f"{stats.bytes / 2**20:,.0f} MiB", f"{anon_peak / 2**20:,.0f} MiB", f"{heap_peak / 2**20:,.0f} MiB",
             max(anon_peak, heap_peak) / src_size],
        ]))
        emit(table("Uploaded compacted file on SeaweedFS", ["layout", "file records", "lookups", "GETs / lookup",
                                                            "p50 ms", "p99 ms"], [
            ["native compacted", n, len(rprobes), g_native, p50_n, p99_n],
            ["RocketMQ compacted", rmq_n, len(rmq_probes), g_rmq, p50_r, p99_r],
        ]))
        path = save_results("index_file", results)
        print(f"[bench] results saved to {path}", file=sys.stderr)
        return 0
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
