"""Spark batch index build: records/s with local[1] and local[2] on the same data set, next to the same
work done in one process by the online writer, in one run.

Data set: --records (default 2,000,000) records produced through a BrokerNode into 4 partitions (key,
header KEYS with two keys, header UNIQ_KEY on every 10th record: ~3.1 index keys per record), uploaded
to the store as stream objects / stream set objects, metadata in SQLite.

Measured, each on the whole data set, from the broker's objects to served UPLOADED files:
1. `spark local[1]` and `spark local[2]`: `run_build` (plan, read + decode on executors, build, compact,
   upload, register) in the session `mqindex spark-build` makes; the Spark session start-up is excluded and
   reported separately. One untimed build first warms the driver's JVM (its start and JIT compilation
   would otherwise fall on the first mode), then `--repeat` alternating runs of each; the fastest is kept;
2. `online writer, 1 process`: the same objects read and decoded (same code: broker.partitions.record_entries),
   entries written with `IndexService.put_batch`, then flush, roll, compact and upload (`maintain()`);
3. `online put_batch only`: the put_batch + flush part of (2), entries already decoded;
4. `columnar extract, 1 process`: only the Spark executors' decode (broker/partitions/batch_columns.py and
   jobs/index_items.column_items) over the same objects in this one process: how much of Spark's lead over
   (2) comes from that decoder rather than from the second core.

Columns: extract_s = reading + decoding the objects (Spark: job 1, with the histogram), build_s = the rest
(Spark: job 2, write + compact + upload per file range, and registration; online: put_batch, flush, roll,
compact, upload). Prints the table, the scaling ratio local[2] / local[1] and the load average before and
after the run (other processes on the machine take cores from both) and the CPU parallelism the machine gives
at those two moments (two spinning processes' work over one's). Every Spark run's CPU seconds are counted
by process (this driver, Spark's JVM, the Python workers, the S3 server: /proc, every 0.25 s); local[2] can
take no less wall time than that CPU spread over all cores, so local[1]'s seconds x cores / local[2]'s CPU
is printed as the ceiling of the scaling ratio on this machine.
Run: `python -m bench.spark_build [--records 2000000] [--store URL]` (SeaweedFS is started otherwise).
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import TreeCPU, emit, save_results, store_or_seaweedfs, table

TOPIC = "bench"
PARTITIONS = 4


def produce(work: Path, store_url: str, meta_url: str, records: int) -> float:
    from broker.node import BrokerNode
    from broker.partitions.client_messages import InMessage

    node = BrokerNode.open(work / "node", store_url, meta_url, upload_interval_s=3600.0, maintenance_interval_s=0,
                           index_config={"maintain_interval_s": 0})
    t0 = time.perf_counter()
    try:
        node.create_topic(TOPIC, PARTITIONS)
        per = 2000
        value = b"x" * 100
        for base in range(0, records, per):
            n = min(per, records - base)
            msgs = []
            for i in range(base, base + n):
                headers = [("KEYS", f"cust-{i % 50_000} sku-{i % 7_777}".encode())]
                if i % 10 == 0:
                    headers.append(("UNIQ_KEY", f"u-{i}".encode()))
                msgs.append(InMessage(value, key=f"order-{i % 200_000}".encode(), headers=headers,
                                      partition=(base // per) % PARTITIONS))
            node.produce(TOPIC, msgs)
            if base // per % 100 == 99:
                print(f"[bench] produced {base + n:,}/{records:,}", file=sys.stderr, flush=True)
        node.flush()
    finally:
        node.close()
    return time.perf_counter() - t0


ROLES = ["this process", "Spark JVM", "Python workers", "S3 server", "other"]


def fmt_cpu(cpu: dict[str, float]) -> str:
    return ", ".join(f"{k} {cpu.get(k, 0.0):.2f} s" for k in ROLES if cpu.get(k))


def role(cmdline: str) -> str:
    """The group a process of the run belongs to (TreeCPU), by its program and, for Python, its module."""
    program = os.path.basename(cmdline.split(" ", 1)[0])
    if program == "java":
        return "Spark JVM"
    if program == "weed":
        return "S3 server"
    if program.startswith("python") and ("-m pyspark.daemon" in cmdline or "-m jobs.spark_daemon" in cmdline):
        return "Python workers"
    return "other"


def spark_run(master: str, opts_kw: dict[str, Any], index_dir: Path) -> dict[str, Any]:
    from jobs.spark_build import BuildOptions, run_build
    from jobs.spark_session import session_setup, spark_session

    t0 = time.perf_counter()
    # the session `mqindex spark-build` makes (its daemon, its Python), with the bench's memory
    setup = session_setup(master, {"spark.ui.enabled": "false", "spark.driver.memory": "4g"})
    spark = spark_session(master, setup, app_name=f"bench-{master}")
    spark.sparkContext.setLogLevel("ERROR")
    startup = time.perf_counter() - t0
    try:
        opts = BuildOptions(index_dir=str(index_dir), master=master, progress_interval_s=10.0, **opts_kw)
        t1 = time.perf_counter()
        s = run_build(opts, spark=spark, out=sys.stderr)
        seconds = time.perf_counter() - t1
    finally:
        spark.stop()
    return {"mode": f"spark {master}", "seconds": seconds, "records": s.records_read,
            "records_per_s": s.records_read / seconds, "files": s.files, "items": s.items,
            "extract_s": s.extract_seconds, "build_s": s.build_seconds, "session_start_s": startup}


def online_run(opts_kw: dict[str, Any], index_dir: Path, max_items: int) -> tuple[dict[str, Any], dict[str, Any]]:
    from broker.partitions.record_entries import object_entries
    from index_service import FileState, IndexService
    from jobs.spark_build import BuildOptions, plan_build
    from storage_tier import open_store

    plan = plan_build(BuildOptions(index_dir=str(index_dir), **opts_kw))
    store = open_store(opts_kw["store_url"])
    svc = IndexService.open(index_dir, store=opts_kw["store_url"], maintain_interval_s=0, max_items=max_items,
                            roll_age_ms=1 << 40, retention_ms=1 << 50, max_pending=4_000_000)
    put_s = 0.0
    decode_s = 0.0
    records = 0
    try:
        t0 = time.perf_counter()
        for t in plan.tasks:
            d0 = time.perf_counter()
            batch = []
            for e in object_entries(store, t.key, t.size or None, t.stream_id, t.start, t.end):
                batch.append((TOPIC, t.partition, e.offset, e.size, e.store_time_ms, e.keys))
            records += t.end - t.start
            p0 = time.perf_counter()
            decode_s += p0 - d0
            for i in range(0, len(batch), 10_000):
                svc.put_batch(batch[i:i + 10_000])
            put_s += time.perf_counter() - p0
        p0 = time.perf_counter()
        svc.flush(None)
        put_s += time.perf_counter() - p0
        svc.roll()
        while True:  # compact and upload every sealed file
            rep = svc.maintain()
            if not rep.compacted and not rep.uploaded:
                break
        seconds = time.perf_counter() - t0
        files = [f for f in svc.files() if f.state is FileState.UPLOADED]
        whole = {"mode": "online writer, 1 process", "seconds": seconds, "records": records,
                 "records_per_s": records / seconds, "files": len(files), "items": sum(f.items for f in files),
                 "extract_s": decode_s, "build_s": seconds - decode_s, "session_start_s": 0.0}
        put_only = {"mode": "online put_batch only", "seconds": put_s, "records": records,
                    "records_per_s": records / put_s, "files": len(files), "items": whole["items"],
                    "extract_s": 0.0, "build_s": put_s, "session_start_s": 0.0}
        return whole, put_only
    finally:
        svc.close()
        store.close()


def columnar_run(opts_kw: dict[str, Any], index_dir: Path) -> dict[str, Any]:
    from broker.partitions.batch_columns import object_columns
    from jobs import index_items
    from jobs.spark_build import BuildOptions, plan_build
    from storage_tier import open_store

    plan = plan_build(BuildOptions(index_dir=str(index_dir), **opts_kw))
    store = open_store(opts_kw["store_url"])
    records = items = 0
    try:
        t0 = time.perf_counter()
        for t in plan.tasks:
            c = object_columns(store, t.key, t.size or None, t.stream_id, t.start, t.end)
            items += len(index_items.column_items(TOPIC, t.partition, c.offset, c.time, c.size, c.counts, c.keys))
            records += c.records
        seconds = time.perf_counter() - t0
    finally:
        store.close()
    return {"mode": "columnar extract, 1 process", "seconds": seconds, "records": records,
            "records_per_s": records / seconds, "files": 0, "items": items, "extract_s": seconds, "build_s": 0.0,
            "session_start_s": 0.0}


def _spin(seconds: float) -> int:
    n = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for i in range(10_000):
            n += i
    return n


def cpu_parallelism(seconds: float = 3.0) -> float:
    """Work two spinning processes get done in `seconds` over the work of one: what the machine gives
    a second process right now (2.0 on two idle cores; less when other processes hold the cores). The
    ceiling of the local[2] / local[1] ratio measured beside it."""
    import multiprocessing as mp

    work = []
    for k in (1, 2):
        with mp.get_context("spawn").Pool(k) as pool:
            work.append(sum(pool.map(_spin, [seconds] * k)))
    return work[1] / work[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.spark_build", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--store", default=None, help="S3 store URL (default: a SeaweedFS started for the run)")
    ap.add_argument("--max-items", type=int, default=1_000_000, help="items per index file (the online default)")
    ap.add_argument("--masters", default="local[1],local[2]")
    ap.add_argument("--repeat", type=int, default=2, help="alternating runs of each master; the best is kept")
    args = ap.parse_args(argv)

    load_before = os.getloadavg()
    parallel_before = cpu_parallelism()
    work = Path(tempfile.mkdtemp(prefix="mqindex-bench-spark-"))
    weed = None
    try:
        store_url, weed = store_or_seaweedfs(args.store, work, "bench-spark")
        meta_url = f"sqlite:///{work}/meta.sqlite"
        produce_s = produce(work, store_url, meta_url, args.records)
        print(f"[bench] produced {args.records:,} records in {produce_s:.1f}s", file=sys.stderr, flush=True)
        opts_kw = {"metadata_url": meta_url, "store_url": store_url, "topic": TOPIC, "max_items": args.max_items}
        masters = [m.strip() for m in args.masters.split(",")]
        # the driver's first build pays the JVM's start and JIT compilation (10-17 s of JVM CPU measured),
        # which would fall on whichever mode ran first: one untimed build warms the JVM for both
        print("[bench] warm-up build (untimed)", file=sys.stderr, flush=True)
        spark_run(masters[0], opts_kw, work / "idx-warm-up")
        meter = TreeCPU(role)
        best: dict[str, dict[str, Any]] = {}
        try:
            for rep in range(args.repeat):
                for master in masters:  # alternating, so drifts of the machine fall on every mode alike
                    before = meter.snapshot()
                    row = spark_run(master, opts_kw, work / f"idx-{master}-{rep}")
                    after = meter.snapshot()
                    row["cpu_s"] = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
                    print(f"[bench] {row['mode']} run {rep + 1}/{args.repeat}: {row['records_per_s']:,.0f} "
                          f"records/s, CPU {fmt_cpu(row['cpu_s'])}", file=sys.stderr, flush=True)
                    if row["mode"] not in best or row["seconds"] < best[row["mode"]]["seconds"]:
                        best[row["mode"]] = row
        finally:
            meter.stop()
        rows = [best[f"spark {m}"] for m in masters]
        whole, put_only = online_run(opts_kw, work / "idx-online", args.max_items)
        rows += [whole, put_only, columnar_run(opts_kw, work / "idx-columnar")]
        by = {r["mode"]: r for r in rows}
        cols = ["mode", "seconds", "records", "records_per_s", "files", "items", "extract_s", "build_s",
                "session_start_s"]
        out = io.StringIO()
        out.write(table(f"Spark index build, {args.records:,} records, {os.cpu_count()} CPUs", cols,
                        [[r[c] for c in cols] for r in rows]))
        one, two = by.get("spark local[1]"), by.get("spark local[2]")
        results: dict[str, Any] = {"records": args.records, "cpus": os.cpu_count(), "rows": rows,
                                   "produce_seconds": produce_s}
        cpu_rows = [[r["mode"], r["seconds"], *(r["cpu_s"].get(k, 0.0) for k in ROLES), sum(r["cpu_s"].values())]
                    for r in rows if "cpu_s" in r]
        out.write("\n" + table("CPU seconds by process in the best run of each mode", ["mode", "wall_s", *ROLES,
                                                                                   "all_cpu_s"], cpu_rows))
        if one and two:
            ratio = two["records_per_s"] / one["records_per_s"]
            results["scaling_local2_over_local1"] = ratio
            # local[2] cannot take less wall time than all its processes' CPU spread over every core
            ceiling = one["seconds"] * (os.cpu_count() or 1) / sum(two["cpu_s"].values())
            results["scaling_ceiling_from_cpu"] = ceiling
            out.write(f"\nscaling local[2] / local[1]: {ratio:.2f}x (best of {args.repeat} alternating runs each)\n")
            out.write(f"ceiling from CPU use: local[1] wall x {os.cpu_count()} cores / local[2] CPU of all its "
                      f"processes = {ceiling:.2f}x\n")
        if two:
            results["local2_over_online"] = two["records_per_s"] / whole["records_per_s"]
            out.write(f"spark local[2] / online writer (same work): {results['local2_over_online']:.2f}x\n")
        load_after = os.getloadavg()
        parallel_after = cpu_parallelism()
        results["load_average"] = {"before": load_before, "after": load_after}
        results["cpu_parallelism"] = {"before": parallel_before, "after": parallel_after}
        out.write(f"load average (1, 5, 15 min): before {' '.join(f'{x:.2f}' for x in load_before)}, after "
                  f"{' '.join(f'{x:.2f}' for x in load_after)}\n")
        out.write(f"CPU parallelism (2 spinning processes / 1, the ceiling of the scaling ratio): before "
                  f"{parallel_before:.2f}x, after {parallel_after:.2f}x\n")
        emit(out.getvalue())
        save_results("spark_build", results)
        return 0
    finally:
        if weed is not None:
            weed.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
