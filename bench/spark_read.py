"""Spark reads of a topic straight from the object store (`spark.read.format("mqindex")`, jobs/spark_source)
against its peers, in one run on the same topic:

1. full read, MB/s of record payload (key + value + headers): Spark local[2] (every row's value summed, so
   every record is decoded and crosses into Spark) with `spark.read.format("mqindex")`, whose batch reads are
   the JVM columnar reader's (jobs/spark_source/jvm, in tasks sized as Spark sizes a file source's), and with
   `reader=python` (the Python data source alone) vs raw ranged GETs of the same objects (2 threads, no
   decoding: what the store gives) vs a Kafka consumer (librdkafka) reading the topic from the broker. The
   first JVM read of the session is printed as it is. Then the JVM read and the Parquet copy below are read
   in turns, WARMUP_ROUNDS rounds of warm-up and WARM_READS measured rounds, and each figure is the median of
   its measured reads (the raw GETs: the median of three after a first). During a fresh session's first
   reads the JVM's C2 compiler compiles Spark's own driver code (Java serialization, the closure cleaner's
   bytecode reader: one to three CPU seconds a method) on one of the two cores, and Spark's own Parquet
   reader is as slow then as this one (docs/BENCHMARKS.md); the compiler's and the garbage collector's CPU
   per MB are printed for each read, so a reader sees when the session was warm;
2. a key predicate: bytes and GETs read and seconds with the key index (`index` option) vs the same
   predicate over a full scan;
3. a value search (`value LIKE '%needle%'`) over a time window: Spark vs a Kafka consumer doing the same
   from the window's first offset.

Beside the full read, the same aggregate over a Parquet copy of the same rows on local disk (uncompressed,
written by Spark from the source, read warm from the page cache): Spark's own columnar JVM reader with no
object store and no network. No Spark reader of these rows, JVM connector included, does better than it on
the same cores, so its MB/s is the ceiling Spark itself sets for the full read's ratio to raw GETs.

CPU seconds of every process (this one, Spark's JVM, its Python workers, the broker, SeaweedFS) per MB are
printed for the Spark full read with the ceiling the machine's cores allow: cores / (CPU s per MB).
Goals (issue 43): full read >= 0.6x raw GETs; key predicate >= 100x fewer bytes than a scan at 10^6 messages.
Run: `mqindex bench spark_read [--mb 256 | --messages 1000000 --value-bytes 160] [--store URL]` (SeaweedFS is
started otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import TreeCPU, emit, save_results, store_or_seaweedfs, table

TOPIC = "bench"
PARTITIONS = 2
VALUE_BYTES = 480  # hex text
KEY_RUN = 10  # consecutive records share a key
NEEDLE_EVERY = 5000
WARM_READS = 3  # the measured full reads: their median is the figure
WARMUP_ROUNDS = 3  # rounds of a JVM read and a Parquet read before the measured ones


def median(runs: list[Any], key: Any = lambda r: r[0]) -> Any:
    """The run in the middle by `key` (seconds), with the rest of its figures."""
    return sorted(runs, key=key)[len(runs) // 2]


def _role(cmd: str) -> str:
    if "java" in cmd and "spark" in cmd:
        return "spark jvm"
    if "pyspark" in cmd or "spark_daemon" in cmd or "daemon" in cmd:
        return "spark python"
    if "weed" in cmd:
        return "seaweedfs"
    if "mqindex serve" in cmd or "serve --data-dir" in cmd:
        return "broker"
    return "other"


def produce(bootstrap: str, mb: int, messages: int | None = None, value_bytes: int = VALUE_BYTES
            ) -> tuple[int, int, int, int]:
    """(records, payload bytes, window start ms, window end ms): the middle fifth of the run is the window.
    `messages` records of `value_bytes` (hex text), or as many as make `mb` MiB."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20, "batch.size": 512 << 10,
                  "queue.buffering.max.kbytes": 262144})
    n = messages if messages else (mb << 20) // (value_bytes + 12)
    payload = 0
    lo = hi = 0
    started = time.monotonic()
    for i in range(n):
        if i == 2 * n // 5:
            lo = int(time.time() * 1000)
        if i == 3 * n // 5:
            hi = int(time.time() * 1000)
        value = os.urandom(value_bytes // 2).hex()
        if i % NEEDLE_EVERY == 0:  # somewhere in the value (hex text has no "needle")
            at = (i // NEEDLE_EVERY) % (len(value) - 6)
            value = value[:at] + "needle" + value[at + 6:]
        key = f"k-{i // KEY_RUN:08d}"
        while True:
            try:
                p.produce(TOPIC, key=key.encode(), value=value.encode(), partition=(i // KEY_RUN) % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
        payload += len(key) + len(value)
        if i % 20000 == 0:
            p.poll(0)
            print(f"[bench] produced {i:,}/{n:,} ({time.monotonic() - started:.0f}s)", file=sys.stderr, flush=True)
    assert p.flush(120) == 0
    return n, payload, lo, hi


def committed_ends(meta: str, store: str) -> dict[int, int]:
    from jobs.spark_source.options import parse_options
    from jobs.spark_source.plan import plan_scan

    plan = plan_scan(parse_options({"metadata": meta, "store": store, "topic": TOPIC}))
    return {r.partition: r.committed_end for r in plan.ranges}


def watermarks(bootstrap: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1] for p in range(PARTITIONS)}
    finally:
        c.close()


def raw_gets(meta: str, store_url: str) -> tuple[float, int, int]:
    """(seconds, bytes, GETs) of reading every object of the topic with 8 MiB ranged GETs, 2 threads."""
    from jobs.spark_source.options import parse_options
    from jobs.spark_source.plan import plan_scan
    from storage_tier import open_store

    plan = plan_scan(parse_options({"metadata": meta, "store": store_url, "topic": TOPIC}))
    objects = {s.key: s.size for s in plan.splits}
    store = open_store(store_url)
    ranges = [(k, a, min(size, a + (8 << 20))) for k, size in objects.items() for a in range(0, size, 8 << 20)]
    t0 = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        got = sum(pool.map(lambda r: len(store.get(r[0], r[1], r[2])), ranges))
    return time.monotonic() - t0, got, len(ranges)


def consumer_read(bootstrap: str, starts: dict[int, int], ends: dict[int, int], needle: bytes | None = None,
                  lo: int = 0, hi: int = 1 << 62) -> tuple[float, int, int]:
    """(seconds, payload bytes, matches) of a librdkafka consumer reading [start, end) of every partition."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "fetch.max.bytes": 52428800})
    t0 = time.monotonic()
    payload = matches = 0
    try:
        c.assign([TopicPartition(TOPIC, p, starts.get(p, 0)) for p in ends])
        left = {p for p in ends if ends[p] > starts.get(p, 0)}
        while left:
            for m in c.consume(1000, 1.0):
                if m.error():
                    raise RuntimeError(str(m.error()))
                if m.offset() >= ends[m.partition()]:
                    left.discard(m.partition())
                    continue
                v = m.value() or b""
                payload += len(m.key() or b"") + len(v)
                if needle is not None and lo <= m.timestamp()[1] < hi and needle in v:
                    matches += 1
                if m.offset() + 1 >= ends[m.partition()]:
                    left.discard(m.partition())
    finally:
        c.close()
    return time.monotonic() - t0, payload, matches


def offsets_at(bootstrap: str, ms: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ts"})
    try:
        got = c.offsets_for_times([TopicPartition(TOPIC, p, ms) for p in range(PARTITIONS)], timeout=30)
        return {tp.partition: max(0, tp.offset) for tp in got}
    finally:
        c.close()


def jvm_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds of the JVM `pid`'s JIT compiler threads (C1 and C2) and of its garbage collector's (G1)."""
    total = {"jit": 0.0, "gc": 0.0}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text()
            group = ("jit" if name.startswith(("C1 CompilerThre", "C2 CompilerThre"))
                     else "gc" if name.startswith(("GC Thread", "G1 ")) else None)
            if group:
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                total[group] += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:  # a thread that ended
            continue
    return total


def in_turns(reads: dict[str, Any], rounds: int, jvm_pid: int) -> dict[str, list[tuple[Any, float, dict[str, float],
                                                                                        float, dict[str, float]]]]:
    """`rounds` rounds of each full read of `reads` (name -> DataFrame), their order alternating from round to
    round: per name, (row, seconds, CPU by role, sampler CPU, the JVM's JIT and GC CPU seconds) of each read."""
    out: dict[str, list[Any]] = {name: [] for name in reads}
    names = list(reads)
    for i in range(rounds):
        for name in names if i % 2 == 0 else names[::-1]:
            jvm0 = jvm_cpu_s(jvm_pid)
            row, took, by_role, sampler = timed_aggregate(reads[name])
            jvm1 = jvm_cpu_s(jvm_pid)
            out[name].append((row, took, by_role, sampler, {k: jvm1[k] - jvm0[k] for k in jvm1}))
            print(f"[bench] round {i + 1}/{rounds}: {name} {took:.2f} s", file=sys.stderr, flush=True)
    return out


def cpu_line(what: str, by_role: dict[str, float], total: float, sampler: float, mb: float) -> str:
    """A read's CPU by process, ms per MB of payload, largest first."""
    return (f"CPU of {what} by process, ms per MB of payload: "
            + ", ".join(f"{k} {1000 * v / mb:.2f}" for k, v in sorted(by_role.items(), key=lambda kv: -kv[1]))
            + f" (total {1000 * total / mb:.2f}; the CPU sampler's own {1000 * sampler / mb:.2f} left out)")


def timed_aggregate(df: Any) -> tuple[Any, float, dict[str, float], float]:
    """The full read's aggregate of `df` (its rows counted, its values' lengths summed): the row, seconds, CPU
    seconds by process role (this process's without the CPU sampler's own) and the sampler's CPU seconds."""
    from pyspark.sql import functions as F

    cpu = TreeCPU(_role)
    sampler = time.pthread_getcpuclockid(cpu._thread.ident)  # the sampler's own CPU is not the read's
    c0, s0 = cpu.snapshot(), time.clock_gettime(sampler)
    t0 = time.monotonic()
    row = df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("v")).collect()[0]
    took = time.monotonic() - t0
    c1, s1 = cpu.snapshot(), time.clock_gettime(sampler)
    cpu.stop()
    c1["this process"] = c1.get("this process", 0.0) - (s1 - s0)
    return row, took, {k: c1.get(k, 0.0) - c0.get(k, 0.0) for k in c1}, s1 - s0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mqindex bench spark_read", description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=256, help="topic size in MiB of record payload (issue: 1024)")
    ap.add_argument("--messages", type=int, default=None,
                    help="number of records instead of --mb (e.g. 1000000 for the key predicate goal at 10^6)")
    ap.add_argument("--value-bytes", type=int, default=VALUE_BYTES,
                    help="bytes of each record's value (hex text; at least 8, room for the search's needle)")
    ap.add_argument("--store", default=None, help="object store URL (default: a SeaweedFS started for the run)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args(argv)
    if args.value_bytes < 8:
        ap.error(f"--value-bytes: at least 8 (room for the value search's needle), got {args.value_bytes}")

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from bench.serve_process import ServeProcess
    from jobs.spark_session import DAEMON_CONF, EXECUTOR_DAEMON
    from jobs.spark_source import register
    from jobs.spark_source.options import parse_options
    from jobs.spark_source.pushdown import Pushed, push
    from jobs.spark_source.read import worker_store
    from jobs.spark_source.source import plan_tasks, read_task

    work = Path(tempfile.mkdtemp(prefix="mqindex-bench-spark-read-"))
    store_url, weed = store_or_seaweedfs(args.store, work, f"spark-read-{uuid.uuid4().hex[:6]}")
    meta = f"sqlite:///{work}/data/metadata.sqlite"
    server = ServeProcess(work / "data", ["--store", store_url, "--metadata", meta, "--upload-interval-s", "1"],
                          work / "serve.log", kafka=True)
    spark = None
    try:
        n, payload, lo, hi = produce(server.bootstrap, args.mb, args.messages, args.value_bytes)
        marks = watermarks(server.bootstrap)
        deadline = time.monotonic() + 300
        while committed_ends(meta, store_url) != marks:
            if time.monotonic() > deadline:
                raise RuntimeError("the topic was not uploaded within 300 s")
            time.sleep(0.5)
        mb = payload / 1e6
        os.environ["PYSPARK_PYTHON"] = sys.executable
        spark = (SparkSession.builder.master("local[2]").appName("bench-spark-read")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config(DAEMON_CONF, EXECUTOR_DAEMON).config("spark.driver.memory", "1g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        opts = {"metadata": meta, "store": store_url, "topic": TOPIC}
        # the Python data source alone (reader=python) in tasks of 32 MiB
        py_opts = {**opts, "reader": "python", "maxSplitBytes": str(32 << 20)}

        def load(**kw: str) -> Any:
            return spark.read.format("mqindex").options(**opts, **kw).load()

        # warm: the JVM and the planning workers, and both executor slots' Python workers (maxSplitBytes 1: a task
        # per record of the 20 read, so the two slots run at once): a worker started during the measured read
        # would add its start (imports, a store client: about 0.5 CPU s) to a figure per MB
        spark.read.format("mqindex").options(**{**py_opts, "maxSplitBytes": "1"}).load().where("offset < 10").count()
        load_before = os.getloadavg()
        row, spark_s, by_role, sampler_cpu = timed_aggregate(spark.read.format("mqindex").options(**py_opts).load())
        load_after = os.getloadavg()
        assert row.n == n, (row.n, n)
        spark_cpu = sum(by_role.values())
        # spark.read.format("mqindex") as users call it: its batch reads are the JVM columnar reader's, in tasks
        # sized as Spark sizes a file source's (columnar.task_bytes): its classes loaded on a small read, then the
        # session's first full read (the JVM still compiling Spark's own driver code), printed as it is
        first = json.dumps({TOPIC: {"0": 20000, "1": 20000}})
        load(endingOffsets=first).agg(F.sum(F.length("value"))).collect()
        jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        jvm0 = jvm_cpu_s(jvm_pid)
        cold_row, cold_s, cold_by_role, _ = timed_aggregate(load())
        cold_jvm = {k: v - jvm0[k] for k, v in jvm_cpu_s(jvm_pid).items()}
        # Spark's own columnar reader over a Parquet copy of the same rows (uncompressed, local disk), read in
        # turns with format("mqindex"), so that both are measured in the same state of the session's JIT
        copy = work / "parquet-copy"
        load().write.mode("overwrite").parquet(str(copy), compression="none")
        turns = in_turns({"mqindex": load(), "parquet": spark.read.parquet(str(copy))}, WARMUP_ROUNDS + WARM_READS,
                         jvm_pid)
        warm = turns["mqindex"][WARMUP_ROUNDS:]
        assert all((r[0].n, r[0].v) == (row.n, row.v) for r in [(cold_row,), *turns["mqindex"], *turns["parquet"]]
                   ), (cold_row, turns, row)
        col_row, col_s, col_by_role, col_sampler, col_jvm = median(warm, key=lambda r: r[1])
        col_cpu, cold_cpu = sum(col_by_role.values()), sum(cold_by_role.values())
        _, pq_s, pq_by_role, _, pq_jvm = median(turns["parquet"][WARMUP_ROUNDS:], key=lambda r: r[1])
        pq_cpu = sum(pq_by_role.values())
        raw_gets(meta, store_url)  # the raw GETs (no JIT): the median of three after a first
        raws = [raw_gets(meta, store_url) for _ in range(WARM_READS)]
        raw_s, raw_bytes, raw_gets_n = median(raws)
        kafka_s, kafka_payload, _ = consumer_read(server.bootstrap, {}, marks)
        assert kafka_payload == payload

        # key predicate: with the index vs a scan (bytes and GETs measured in this process, same functions)
        key = f"k-{(n // KEY_RUN) // 2:08d}"
        from pyspark.sql.datasource import EqualTo

        def measured(extra: dict[str, str]) -> tuple[int, int, int]:
            o = parse_options({**py_opts, **extra})
            pushed = Pushed()
            list(push(pushed, [EqualTo(("key",), key.encode())]))
            store = worker_store(o.store_url)
            before = store.meter.snapshot()
            rows = sum(1 for t in plan_tasks(o, pushed) for _ in read_task(o, t, pushed))
            d = store.meter.snapshot() - before
            return d.bytes_out, d["GET"], rows

        idx_bytes, idx_gets, idx_rows = measured({"index": server.url})
        scan_bytes, scan_gets, scan_rows = measured({})
        assert idx_rows == scan_rows == KEY_RUN, (idx_rows, scan_rows)
        # the same key query run by Spark, counted by SeaweedFS (when the bench started it): what the tasks and the
        # node asked of the store between them (the node reads no record for a key predicate: /v1/index/hits)
        traffic = (lambda: weed.bucket_traffic("mqindex")) if weed is not None else None
        before = traffic() if traffic else None
        t0 = time.monotonic()
        assert load(index=server.url).where(
            F.col("key") == key.encode()).count() == KEY_RUN
        idx_s = time.monotonic() - t0
        served = (traffic() - before) if traffic and before else None
        t0 = time.monotonic()
        assert load().where(F.col("key") == key.encode()).count() == KEY_RUN
        scan_s = time.monotonic() - t0

        # value search over a time window
        t0 = time.monotonic()
        window = load(startingTimestamp=str(lo), endingTimestamp=str(hi))
        found = window.where("CAST(value AS STRING) LIKE '%needle%'").count()
        search_s = time.monotonic() - t0
        starts = offsets_at(server.bootstrap, lo)
        ends = offsets_at(server.bootstrap, hi)
        k_s, _, k_found = consumer_read(server.bootstrap, starts, {p: ends.get(p, marks[p]) or marks[p]
                                                                    for p in range(PARTITIONS)}, b"needle", lo, hi)
        cores = os.cpu_count() or 1
        rows = [
            ["spark local[2] format(\"mqindex\") full read (JVM columnar reader)", col_s, mb / col_s,
             f"{(mb / col_s) / (raw_bytes / 1e6 / raw_s):.2f}x raw, {pq_s / col_s:.2f}x parquet",
             f"{col_cpu / mb:.3f}", f"{cores / (col_cpu / mb):.1f}"],
            ["  the same, the session's first full read", cold_s, mb / cold_s,
             f"{(mb / cold_s) / (raw_bytes / 1e6 / raw_s):.2f}x raw",
             f"{cold_cpu / mb:.3f}", f"{cores / (cold_cpu / mb):.1f}"],
            ["  the same with reader=python (the Python data source)", spark_s, mb / spark_s,
             f"{(mb / spark_s) / (raw_bytes / 1e6 / raw_s):.2f}x raw",
             f"{spark_cpu / mb:.3f}", f"{cores / (spark_cpu / mb):.1f}"],
            ["raw ranged GETs (2 threads)", raw_s, raw_bytes / 1e6 / raw_s, f"{raw_gets_n} GETs", "", ""],
            ["spark local[2] over a Parquet copy on local disk", pq_s, mb / pq_s,
             f"{(mb / pq_s) / (raw_bytes / 1e6 / raw_s):.2f}x raw", f"{pq_cpu / mb:.3f}",
             f"{cores / (pq_cpu / mb):.1f}"],
            ["kafka consumer (librdkafka)", kafka_s, mb / kafka_s,
             f"spark {kafka_s / col_s:.2f}x its speed", "", ""],
        ]
        emit(table(f"full read of {n:,} records, {mb:.0f} MB payload ({raw_bytes / 1e6:.0f} MB of objects)",
                   ["reader", "s", "MB/s", "ratio", "CPU s/MB", "MB/s ceiling"], rows))
        key_rows = [["with the index", idx_bytes, idx_gets, idx_s], ["full scan", scan_bytes, scan_gets, scan_s],
                    ["scan / index", f"{scan_bytes / max(1, idx_bytes):.0f}x", "", ""]]
        if served is not None:
            key_rows.insert(1, ["with the index, run by Spark: SeaweedFS served (tasks and node)", served.sent_bytes,
                                served.requests.get("GET", 0), idx_s])
            key_rows.append(["scan / what SeaweedFS served", f"{scan_bytes / max(1, served.sent_bytes):.0f}x", "", ""])
        emit(table(f"key predicate key = '{key}' ({KEY_RUN} hits)", ["read", "bytes", "GETs", "s (spark)"], key_rows))
        emit(table("value search (value LIKE '%needle%') over the middle fifth of the run",
                   ["reader", "s", "matches"], [["spark local[2]", search_s, found], ["kafka consumer", k_s, k_found]]))
        emit(cpu_line("the Python data source's full read", by_role, spark_cpu, sampler_cpu, mb)
             + f"; load average {load_before[0]:.1f} at its start, {load_after[0]:.1f} at its end")
        emit(cpu_line("the JVM columnar full read (format(\"mqindex\"))", col_by_role, col_cpu, col_sampler, mb))
        def jvm_ms(r: dict[str, float]) -> str:
            return f"{1000 * r['jit'] / mb:.2f} / {1000 * r['gc'] / mb:.2f}"

        for name, runs in turns.items():
            emit(f"{name} full reads in turns, s (the JVM's JIT compiler / GC CPU, ms/MB): warm-up "
                 + ", ".join(f"{r[1]:.2f} ({jvm_ms(r[4])})" for r in runs[:WARMUP_ROUNDS]) + "; measured "
                 + ", ".join(f"{r[1]:.2f} ({jvm_ms(r[4])})" for r in runs[WARMUP_ROUNDS:]))
        emit(f"the session's first format(\"mqindex\") read: JIT compiler / GC CPU {jvm_ms(cold_jvm)} ms/MB; "
             f"raw GETs, s: {', '.join(f'{r[0]:.2f}' for r in raws)}")
        save_results("spark_read", {"records": n, "payload_mb": mb, "object_mb": raw_bytes / 1e6,
                                    "spark_s": spark_s, "raw_s": raw_s, "kafka_s": kafka_s, "spark_cpu_s": spark_cpu,
                                    "parquet_s": pq_s, "parquet_cpu_s": pq_cpu,
                                    "spark_cpu_by_process_s": by_role, "sampler_cpu_s": sampler_cpu,
                                    "columnar_s": col_s, "columnar_cpu_s": col_cpu,
                                    "columnar_runs_s": [w[1] for w in warm], "raw_runs_s": [r[0] for r in raws],
                                    "warmup_rounds": WARMUP_ROUNDS,
                                    "turns_s": {k: [r[1] for r in v] for k, v in turns.items()},
                                    "turns_jvm_cpu_s": {k: [r[4] for r in v] for k, v in turns.items()},
                                    "columnar_first_jvm_cpu_s": cold_jvm, "columnar_jvm_cpu_s": col_jvm,
                                    "parquet_jvm_cpu_s": pq_jvm,
                                    "columnar_first_s": cold_s, "columnar_first_cpu_s": cold_cpu,
                                    "columnar_cpu_by_process_s": col_by_role,
                                    "load_at_start": load_before[0], "load_at_end": load_after[0],
                                    "key_index_bytes": idx_bytes, "key_scan_bytes": scan_bytes,
                                    "key_index_served_bytes": served.sent_bytes if served else None,
                                    "key_index_gets": idx_gets, "key_scan_gets": scan_gets, "key_index_s": idx_s,
                                    "key_scan_s": scan_s, "search_s": search_s, "search_kafka_s": k_s,
                                    "search_matches": found, "search_kafka_matches": k_found})
        return 0
    finally:
        if spark is not None:
            spark.stop()
        server.stop()
        if weed is not None:
            weed.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
