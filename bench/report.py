"""The lookup report: find one message by key in a topic of 10^5, 10^6 (, 10^7) messages, the same data
for every system, in one run; writes docs/benchmarks/*.png and a table into docs/BENCHMARKS.md.

Systems, each loaded with the same records (topic, key, partition, offset, time, 200-byte value):
- mqindex through HTTP: a real `mqindex serve` on SeaweedFS, the records produced through its Kafka listener
  (confluent-kafka, acks=all), each key looked up with GET /v1/messages?topic=&key= while its index file is
  WRITING, once POST /v1/admin/index/roll has compacted it (local, upload held), and once
  POST /v1/admin/index/maintain has uploaded it, read cold by a restarted process;
- a full scan of the topic filtered by key (what Kafka UIs do): a Kafka consumer of a freshly started node reads
  every partition from offset 0 (the messages come from SeaweedFS) and compares every key;
- PostgreSQL: a table (topic, key, partition, offset, time) loaded with COPY, then a B-tree index;
- RocksDB (rocksdict) keyed by topic#key.

Run: `mqindex bench report [--sizes 100000,1000000] [--lookups 200] [--scans 3] [--no-docs]`.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench.common import emit, percentile, progress, save_results, store_or_seaweedfs, table
from bench.kafka import produce_one
from bench.serve_process import ServeProcess

TOPIC = "orders"
PARTITIONS = 8
VALUE = 200
S3_GET_PER_MILLION = 0.40  # USD per million GET requests, S3 Standard (us-east-1)
PG_DSN = os.environ.get("MQINDEX_PG_DSN", "host=127.0.0.1 port=5432 dbname=test user=postgres")
DOCS = Path(__file__).resolve().parent.parent / "docs"
BEGIN, END = "<!-- bench report: begin -->", "<!-- bench report: end -->"


def make_records(n: int, t0: int) -> list[tuple[str, int, int, int, int, list[str]]]:
    return [(TOPIC, i % PARTITIONS, i // PARTITIONS, VALUE, t0 + i // 100, [f"ORD-{i:010d}"]) for i in range(n)]


def lat_stats(lat: list[float]) -> dict[str, float]:
    return {"p50_ms": percentile(lat, 50) * 1e3, "p99_ms": percentile(lat, 99) * 1e3}


# -- mqindex through HTTP ----------------------------------------------------------------------------
def serve_args(store_url: str, n: int) -> list[str]:
    """One index file holds the whole topic (it rolls only when asked), so each state holds every key."""
    return ["--store", store_url, "--index-max-items", str(n + 10_000), "--index-slots", str(max(1024, n // 4)),
            "--index-roll-age-ms", str(10**10), "--compaction-interval-s", "0"]


def store_gets(client: httpx.Client, component: str | None = None) -> float:
    """GET requests the node has sent to its object store (one component: "index" or "broker", or all), from
    its /metrics."""
    total = 0.0
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("mqindex_object_store_requests") and 'kind="GET"' in line and (
                component is None or f'component="{component}"' in line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def kafka_produce(bootstrap: str, recs: list[Any]) -> None:
    """The records through the node's Kafka listener (librdkafka, acks=all), each to its partition."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1 << 20,
                  "message.max.bytes": 4 << 20, "queue.buffering.max.kbytes": 256 * 1024,
                  "queue.buffering.max.messages": 1_000_000, "compression.type": "none",
                  "enable.idempotence": False})
    failed: list[str] = []

    def done(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    value = b"v" * VALUE
    started = time.perf_counter()
    step = max(1, len(recs) // 10)
    for i, (tp, q, _off, _size, _t, ks) in enumerate(recs):
        produce_one(p, i, tp, value, ks[0].encode(), done, partition=q)
        if (i + 1) % step == 0:
            progress("kafka produce", i + 1, len(recs), started)
    left = p.flush(600)
    if left or failed:
        raise RuntimeError(f"kafka produce: {left} not delivered, {len(failed)} failed ({failed[:3]})")


def http_lookups(client: httpx.Client, recs: list[Any], probes: list[int], label: str) -> dict[str, Any]:
    """GET /v1/messages?topic=&key= for each probe; the one message carrying the key must come back."""
    g0, i0 = store_gets(client), store_gets(client, "index")
    lat = []
    for i in probes:
        key = recs[i][5][0]
        t = time.perf_counter()
        r = client.get("/v1/messages", params={"topic": TOPIC, "key": key, "max": 10})
        lat.append(time.perf_counter() - t)
        r.raise_for_status()
        got = [(m["key"], m["partition"]) for m in r.json()["messages"]]
        assert got == [(key, recs[i][1])], (label, key, got)
    return {**lat_stats(lat), "gets": (store_gets(client) - g0) / len(probes),
            "index_gets": (store_gets(client, "index") - i0) / len(probes)}


def kafka_scan(bootstrap: str, key: str, ends: dict[int, int]) -> int:
    """What a Kafka UI's "search by key" does: read every partition from offset 0 to its end and compare
    every message's key; the offset of the match."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"report-scan-{uuid.uuid4().hex}",
                  "enable.auto.commit": False, "max.partition.fetch.bytes": 1 << 20, "fetch.max.bytes": 64 << 20})
    want = key.encode()
    found = -1
    left = {q for q, e in ends.items() if e > 0}
    try:
        c.assign([TopicPartition(TOPIC, q, 0) for q in ends])
        deadline = time.monotonic() + 1800
        while left:
            if time.monotonic() > deadline:
                raise RuntimeError(f"full scan: partitions {sorted(left)} not read to their ends")
            for m in c.consume(10_000, 1.0):
                if m.error():
                    raise RuntimeError(f"full scan: {m.error()}")
                if m.key() == want:
                    found = m.offset()
                if m.offset() >= ends[m.partition()] - 1:
                    left.discard(m.partition())
    finally:
        c.close()
    return found


def run_mqindex(work: Path, store_url: str, recs: list[Any], probes: list[int], scans: int) -> dict[str, Any]:
    """A real `mqindex serve` on SeaweedFS: the records produced through its Kafka listener, looked up through
    GET /v1/messages with the key's index file WRITING, COMPACTED (local) and UPLOADED read cold by a
    restarted process; then full scans of the topic through a Kafka consumer of the restarted process."""
    n = len(recs)
    out: dict[str, Any] = {}
    data = work / "data"
    work.mkdir(parents=True, exist_ok=True)
    args = serve_args(store_url, n)
    srv = ServeProcess(data, args, work / "serve.log", kafka=True, what="mqindex serve (report)")
    try:
        with httpx.Client(base_url=srv.url, timeout=1800) as client:
            client.post("/v1/topics", json={"name": TOPIC, "partitions": PARTITIONS}).raise_for_status()
            started = time.perf_counter()
            kafka_produce(srv.bootstrap, recs)
            out["produce_per_s"] = n / (time.perf_counter() - started)
            while sum(f["items"] for f in client.get("/v1/index/files").json()["files"]) < n:
                time.sleep(0.05)
            out["ingest_per_s"] = n / (time.perf_counter() - started)  # acknowledged and indexed
            out["writing"] = http_lookups(client, recs, probes, "writing")
            rolled = client.post("/v1/admin/index/roll", params={"hold_upload_s": 86400}).json()
            files = [f for f in rolled["files"] if f["items"]]
            assert [f["state"] for f in files] == ["COMPACTED"], files
            out["index_bytes"] = files[0]["size_bytes"]
            out["compacted"] = http_lookups(client, recs, probes, "compacted")
            maintained = client.post("/v1/admin/index/maintain").json()
            assert [f["state"] for f in maintained["files"] if f["items"]] == ["UPLOADED"], maintained
        srv.stop()
        # a new process on the same data: nothing of the uploaded file (or the messages) is cached
        srv = ServeProcess(data, args, work / "serve.log", kafka=True, what="mqindex serve (report, restarted)")
        with httpx.Client(base_url=srv.url, timeout=1800) as client:
            out["uploaded"] = http_lookups(client, recs, probes, "uploaded")
        ends = {q: len(range(q, n, PARTITIONS)) for q in range(PARTITIONS)}  # offsets 0.. per partition
        lat, gets = [], []
        for i in probes[:scans]:
            srv.stop()  # each scan on a fresh process: its block cache holds nothing of the topic
            srv = ServeProcess(data, args, work / "serve.log", kafka=True, what="mqindex serve (report, scan)")
            with httpx.Client(base_url=srv.url, timeout=1800) as client:
                g0 = store_gets(client)
                t = time.perf_counter()
                off = kafka_scan(srv.bootstrap, recs[i][5][0], ends)
                lat.append(time.perf_counter() - t)
                gets.append(store_gets(client) - g0)
            assert off >= 0, (recs[i], off)
        out["scan"] = {**lat_stats(lat), "gets": sum(gets) / len(gets), "samples": len(lat)}
    except BaseException:
        log = (work / "serve.log").read_text(errors="replace")
        print(f"[bench] mqindex serve log (end):\n{log[-3000:]}", file=sys.stderr)
        raise
    finally:
        srv.stop()
    return out


# -- PostgreSQL ------------------------------------------------------------------------------------
def run_postgres(recs: list[Any], probes: list[int], schema: str) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"CREATE SCHEMA {schema}")
        try:
            conn.execute(f"CREATE TABLE {schema}.msg (topic text, key text, part int, off bigint, t bigint)")
            started = time.perf_counter()
            with conn.cursor().copy(f"COPY {schema}.msg (topic, key, part, off, t) FROM STDIN") as cp:
                for tp, q, off, _s, t, ks in recs:
                    cp.write_row((tp, ks[0], q, off, t))
            conn.execute(f"CREATE INDEX msg_key ON {schema}.msg (topic, key)")
            conn.execute(f"ANALYZE {schema}.msg")
            rate = len(recs) / (time.perf_counter() - started)
            idx_bytes = conn.execute(f"SELECT pg_relation_size('{schema}.msg_key')").fetchone()[0]  # type: ignore[index]
            lat = []
            for i in probes:
                t0 = time.perf_counter()
                rows = conn.execute(f"SELECT part, off, t FROM {schema}.msg WHERE topic = %s AND key = %s",
                                    (TOPIC, recs[i][5][0])).fetchall()
                lat.append(time.perf_counter() - t0)
                assert rows and rows[0][1] == recs[i][2]
        finally:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return {"ingest_per_s": rate, "index_bytes": idx_bytes, **lat_stats(lat)}


# -- RocksDB ---------------------------------------------------------------------------------------
def run_rocksdb(path: Path, recs: list[Any], probes: list[int]) -> dict[str, Any]:
    from rocksdict import Options, Rdict, WriteBatch

    pack = struct.Struct("<iqq").pack
    db = Rdict(str(path), Options(raw_mode=True))
    started = time.perf_counter()
    for i in range(0, len(recs), 10_000):
        wb = WriteBatch(raw_mode=True)
        for tp, q, off, _s, t, ks in recs[i:i + 10_000]:
            wb.put(f"{tp}#{ks[0]}".encode(), pack(q, off, t))
        db.write(wb)
    db.flush()
    rate = len(recs) / (time.perf_counter() - started)
    db.compact_range(None, None)
    lat = []
    get = db.get
    for i in probes:
        t0 = time.perf_counter()
        v = get(f"{TOPIC}#{recs[i][5][0]}".encode())
        lat.append(time.perf_counter() - t0)
        assert v is not None and struct.unpack("<iqq", v)[1] == recs[i][2]
    db.close()
    size = sum(f.stat().st_size for f in path.iterdir() if f.suffix == ".sst")
    return {"ingest_per_s": rate, "index_bytes": size, **lat_stats(lat)}


# -- output ----------------------------------------------------------------------------------------
SERIES = [("mqindex HTTP, WRITING file", lambda r: r["mqindex"]["writing"]),
          ("mqindex HTTP, COMPACTED file (local)", lambda r: r["mqindex"]["compacted"]),
          ("mqindex HTTP, UPLOADED file (cold node)", lambda r: r["mqindex"]["uploaded"]),
          ("full scan by key (Kafka consumer, cold node)", lambda r: r["scan"]),
          ("PostgreSQL B-tree", lambda r: r["postgres"]),
          ("RocksDB get", lambda r: r["rocksdb"])]


def plots(results: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    sizes = sorted(int(s) for s in results["sizes"])
    runs = [results["sizes"][str(s)] for s in sizes]
    files = []
    fig, ax = plt.subplots(figsize=(11, 5.5))
    for name, get in SERIES:
        line = ax.plot(sizes, [get(r)["p50_ms"] for r in runs], marker="o", label=f"{name} p50")
        ax.plot(sizes, [get(r)["p99_ms"] for r in runs], marker="x", linestyle="--", color=line[0].get_color(),
                label=f"{name} p99")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("messages in the topic")
    ax.set_ylabel("lookup latency, ms")
    ax.set_title("Find one message by key (SeaweedFS)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    files.append(out / "lookup_latency.png")
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)

    big = runs[-1]
    bars = [("mqindex: Kafka produce (acks=all)\nuntil indexed; stores the messages", big["mqindex"]["ingest_per_s"]),
            ("PostgreSQL COPY + index\n(index rows only)", big["postgres"]["ingest_per_s"]),
            ("RocksDB WriteBatch\n(index rows only)", big["rocksdb"]["ingest_per_s"])]
    bytes_ = [("mqindex compacted", big["mqindex"]["index_bytes"] / sizes[-1]),
              ("PostgreSQL B-tree", big["postgres"]["index_bytes"] / sizes[-1]),
              ("RocksDB SSTs", big["rocksdb"]["index_bytes"] / sizes[-1])]
    for fname, title, ylabel, data in (("ingest_rate.png", f"Ingest, {sizes[-1]:,} messages", "messages/s", bars),
                                       ("index_bytes.png", f"Index bytes per message, {sizes[-1]:,} messages",
                                        "bytes", bytes_)):
        fig, ax = plt.subplots(figsize=(7, 4))
        bar = ax.bar([d[0] for d in data], [d[1] for d in data])
        ax.bar_label(bar, fmt="{:,.0f}" if fname == "ingest_rate.png" else "{:,.1f}", fontsize=8)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.tick_params(axis="x", labelsize=7)
        fig.tight_layout()
        files.append(out / fname)
        fig.savefig(files[-1], dpi=110)
        plt.close(fig)

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for name, key in (("mqindex cold", "uploaded"), ("full scan", None)):
        gets = [(r["mqindex"][key]["gets"] if key else r["scan"]["gets"]) * 1e6 for r in runs]
        a1.plot(sizes, gets, marker="o", label=name)
        a2.plot(sizes, [g / 1e6 * S3_GET_PER_MILLION for g in gets], marker="o", label=name)
    for a, yl in ((a1, "GET requests per million lookups"), (a2, "USD per million lookups (GETs only)")):
        a.set_xscale("log")
        a.set_yscale("log")
        a.set_xlabel("messages in the topic")
        a.set_ylabel(yl)
        a.legend(fontsize=7)
    fig.suptitle(f"Cold lookups on object storage at S3 prices (${S3_GET_PER_MILLION}/million GETs)")
    fig.tight_layout()
    files.append(out / "cold_cost.png")
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)
    return files


def markdown(results: dict[str, Any], command: str) -> str:
    sizes = sorted(int(s) for s in results["sizes"])
    rows = []
    for name, get in SERIES:
        for s in sizes:
            r = get(results["sizes"][str(s)])
            gets = r.get("gets", 0.0)
            rows.append([name, s, r["p50_ms"], r["p99_ms"], gets, r.get("index_gets", 0.0),
                         gets * S3_GET_PER_MILLION])
    text = [f"Command: `{command}`. Machine: {results['machine']}, load average {results['load_end']:.1f} at the "
            f"end; {results['minutes']:.1f} minutes. One run; ratios within a row set are what",
            "count (the machine is shared). Plots: docs/benchmarks/lookup_latency.png, ingest_rate.png,",
            "index_bytes.png, cold_cost.png.", "",
            table("Find one message by key", ["system", "messages", "p50 ms", "p99 ms", "GETs/lookup",
                                              "of which index", "USD per million lookups (GETs)"], rows)]
    ing = []
    for s in sizes:
        r = results["sizes"][str(s)]
        for name, rr in (("mqindex: Kafka produce (acks=all), indexed", r["mqindex"]),
                         ("PostgreSQL COPY + CREATE INDEX", r["postgres"]),
                         ("RocksDB WriteBatch", r["rocksdb"])):
            ing.append([name, s, rr["ingest_per_s"], rr["index_bytes"] / s])
    text.append(table("Ingest and index size", ["system", "messages", "messages/s", "index bytes/message"], ing))
    return "\n".join(text)


def write_docs(md: str) -> None:
    path = DOCS / "BENCHMARKS.md"
    doc = path.read_text()
    block = f"{BEGIN}\n{md}\n{END}"
    if BEGIN in doc and END in doc:
        doc = doc[:doc.index(BEGIN)] + block + doc[doc.index(END) + len(END):]
    else:
        doc = doc.rstrip("\n") + "\n\n## Lookup report (`mqindex bench report`)\n\n" + block + "\n"
    path.write_text(doc)


def machine() -> str:
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / 2**20:.0f} GiB RAM"
    except OSError:
        pass
    cpu = platform.processor() or platform.machine()
    return f"{os.cpu_count()} cores ({cpu}), {mem}, {platform.system()} {platform.release()}, Python " \
           f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f} at the start"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.report", description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100000,1000000", help="topic sizes, comma-separated")
    ap.add_argument("--lookups", type=int, default=200, help="lookups per system and size")
    ap.add_argument("--scans", type=int, default=3, help="full scans per size (each reads the whole topic)")
    ap.add_argument("--no-docs", action="store_true", help="print only; leave docs/ alone")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="mqindex-report-"))
    weed = None
    results: dict[str, Any] = {"machine": machine(), "sizes": {}}
    run_started = time.perf_counter()
    try:
        _url, weed = store_or_seaweedfs(None, work, "report")
        for n in sizes:
            t0 = int(time.time() * 1000)
            recs = make_records(n, t0)
            rng = random.Random(n)
            probes = [rng.randrange(n) for _ in range(args.lookups)]
            r: dict[str, Any] = {}
            started = time.perf_counter()
            r["mqindex"] = run_mqindex(work / f"mq{n}", weed.store_url("mqindex", f"broker-{n}"), recs, probes,
                                       args.scans)
            r["scan"] = r["mqindex"].pop("scan")
            progress(f"mqindex {n:,}", n, n, started)
            r["postgres"] = run_postgres(recs, probes, f"mqindex_report_{os.getpid()}")
            progress(f"postgres {n:,}", n, n, started)
            r["rocksdb"] = run_rocksdb(work / f"rocks{n}", recs, probes)
            progress(f"rocksdb {n:,}", n, n, started)
            results["sizes"][str(n)] = r
            del recs
        results["load_end"] = os.getloadavg()[0]
        results["minutes"] = (time.perf_counter() - run_started) / 60
        command = "mqindex bench report" + (" " + " ".join(argv) if argv else "")
        md = markdown(results, command)
        emit(md)
        if not args.no_docs:
            files = plots(results, DOCS / "benchmarks")
            write_docs(md)
            print(f"[bench] wrote {', '.join(str(f) for f in files)} and docs/BENCHMARKS.md", file=sys.stderr)
        path = save_results("report", results)
        print(f"[bench] results saved to {path}", file=sys.stderr)
        return 0
    finally:
        if weed is not None:
            weed.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
