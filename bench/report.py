"""The lookup report: find one message by key in a topic of 10^5, 10^6 (, 10^7) messages, the same data
for every system, in one run; writes docs/benchmarks/*.png and a table into docs/BENCHMARKS.md.

Systems, each loaded with the same records (topic, key, partition, offset, time, 200-byte value):
- mqindex (IndexService in process, the code behind GET /v1/internal/index/query): the key in the
  WRITING file, in the local COMPACTED file, and in UPLOADED files read cold from SeaweedFS;
- a full scan of the topic's messages on SeaweedFS filtered by key (what Kafka UIs do);
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
from pathlib import Path
from typing import Any

from bench.common import emit, percentile, progress, save_results, store_or_seaweedfs, table

TOPIC = "orders"
PARTITIONS = 8
VALUE = 200
SEGMENT = 100_000  # messages per scanned object
S3_GET_PER_MILLION = 0.40  # USD per million GET requests, S3 Standard (us-east-1)
PG_DSN = os.environ.get("MQINDEX_PG_DSN", "host=127.0.0.1 port=5432 dbname=test user=postgres")
DOCS = Path(__file__).resolve().parent.parent / "docs"
BEGIN, END = "<!-- bench report: begin -->", "<!-- bench report: end -->"
_FRAME = struct.Struct("<HiqqI")  # key length, partition, offset, time, value length


def make_records(n: int, t0: int) -> list[tuple[str, int, int, int, int, list[str]]]:
    return [(TOPIC, i % PARTITIONS, i // PARTITIONS, VALUE, t0 + i // 100, [f"ORD-{i:010d}"]) for i in range(n)]


def lat_stats(lat: list[float]) -> dict[str, float]:
    return {"p50_ms": percentile(lat, 50) * 1e3, "p99_ms": percentile(lat, 99) * 1e3}


# -- mqindex ---------------------------------------------------------------------------------------
def run_mqindex(work: Path, store_url: str, recs: list[Any], probes: list[int]) -> dict[str, Any]:
    from index_service import FileState, IndexService

    n = len(recs)
    out: dict[str, Any] = {}
    svc = IndexService.open(work / "idx", store=store_url, slots=max(1024, n // 4), max_items=n + 1,
                            maintain_interval_s=0)
    try:
        started = time.perf_counter()
        for i in range(0, n, 10_000):
            svc.put_batch(recs[i:i + 10_000])
        svc.flush(None)
        out["ingest_per_s"] = n / (time.perf_counter() - started)

        def lookups(label: str) -> dict[str, Any]:
            store = svc.store
            g0 = store.meter.snapshot()["GET"]
            lat = []
            for i in probes:
                key = recs[i][5][0]
                t = time.perf_counter()
                hits = svc.query(TOPIC, key, 10)
                lat.append(time.perf_counter() - t)
                assert len(hits) == 1 and hits[0].offset == recs[i][2], (label, key, hits)
            gets = (store.meter.snapshot()["GET"] - g0) / len(probes)
            return {**lat_stats(lat), "gets": gets}

        out["writing"] = lookups("writing")
        svc.roll()
        for mf in svc.files_map.by_state(FileState.SEALED):
            svc.lifecycle.compact(mf)
        comp = [f for f in svc.files() if f.state is FileState.COMPACTED]
        out["index_bytes"] = sum(f.size_bytes for f in comp)
        out["compacted"] = lookups("compacted")
        svc.maintain()  # uploads the compacted file; its local copy goes
        states = {f.state.value for f in svc.files() if f.items}
        assert states == {"UPLOADED"}, states
    finally:
        svc.close()
    # reopened: nothing of the uploaded file is cached in this process (cold)
    svc = IndexService.open(work / "idx", store=store_url, maintain_interval_s=0)
    try:
        store = svc.store
        g0 = store.meter.snapshot()["GET"]
        lat = []
        for i in probes:
            key = recs[i][5][0]
            t = time.perf_counter()
            hits = svc.query(TOPIC, key, 10)
            lat.append(time.perf_counter() - t)
            assert len(hits) == 1 and hits[0].offset == recs[i][2], (key, hits)
        out["uploaded"] = {**lat_stats(lat), "gets": (store.meter.snapshot()["GET"] - g0) / len(probes)}
    finally:
        svc.close()
    return out


# -- full scan -------------------------------------------------------------------------------------
def write_topic(store: Any, recs: list[Any]) -> tuple[list[str], float]:
    """The topic's messages as objects of SEGMENT framed records (key, partition, offset, time, value)."""
    keys: list[str] = []
    value = b"v" * VALUE
    started = time.perf_counter()
    for s in range(0, len(recs), SEGMENT):
        parts = []
        for _t, q, off, _size, t, ks in recs[s:s + SEGMENT]:
            k = ks[0].encode()
            parts.append(_FRAME.pack(len(k), q, off, t, VALUE) + k + value)
        name = f"topic/{s // SEGMENT:08d}.seg"
        store.put(name, b"".join(parts))
        keys.append(name)
    return keys, len(recs) / (time.perf_counter() - started)


def scan_for(store: Any, segments: list[str], key: str) -> tuple[int, int]:
    """Read every segment and compare every message's key (a UI's "search by key"): (offset, GETs)."""
    want = key.encode()
    found = -1
    gets = 0
    unpack = _FRAME.unpack_from
    size = _FRAME.size
    for name in segments:
        data = store.get(name)
        gets += 1
        pos = 0
        end = len(data)
        while pos < end:
            klen, _q, off, _t, vlen = unpack(data, pos)
            if data[pos + size:pos + size + klen] == want:
                found = off
            pos += size + klen + vlen
    return found, gets


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
SERIES = [("mqindex WRITING file", lambda r: r["mqindex"]["writing"]),
          ("mqindex COMPACTED file (local)", lambda r: r["mqindex"]["compacted"]),
          ("mqindex UPLOADED files (cold, SeaweedFS)", lambda r: r["mqindex"]["uploaded"]),
          ("full scan filtered by key (SeaweedFS)", lambda r: r["scan"]),
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
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, get in SERIES:
        line = ax.plot(sizes, [get(r)["p50_ms"] for r in runs], marker="o", label=f"{name} p50")
        ax.plot(sizes, [get(r)["p99_ms"] for r in runs], marker="x", linestyle="--", color=line[0].get_color(),
                label=f"{name} p99")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("messages in the topic")
    ax.set_ylabel("lookup latency, ms")
    ax.set_title("Find one message by key")
    ax.legend(fontsize=6)
    fig.tight_layout()
    files.append(out / "lookup_latency.png")
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)

    big = runs[-1]
    bars = [("mqindex put_batch", big["mqindex"]["ingest_per_s"]),
            ("topic objects (scan)", big["scan"]["ingest_per_s"]),
            ("PostgreSQL COPY + index", big["postgres"]["ingest_per_s"]),
            ("RocksDB WriteBatch", big["rocksdb"]["ingest_per_s"])]
    bytes_ = [("mqindex compacted", big["mqindex"]["index_bytes"] / sizes[-1]),
              ("PostgreSQL B-tree", big["postgres"]["index_bytes"] / sizes[-1]),
              ("RocksDB SSTs", big["rocksdb"]["index_bytes"] / sizes[-1])]
    for fname, title, ylabel, data in (("ingest_rate.png", f"Ingest, {sizes[-1]:,} messages", "messages/s", bars),
                                       ("index_bytes.png", f"Index bytes per message, {sizes[-1]:,} messages",
                                        "bytes", bytes_)):
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.bar([d[0] for d in data], [d[1] for d in data])
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
            rows.append([name, s, r["p50_ms"], r["p99_ms"], gets, gets * S3_GET_PER_MILLION])
    text = [f"Command: `{command}`. Machine: {results['machine']}. One run; ratios within a row set are what",
            "count (the machine is shared). Plots: docs/benchmarks/lookup_latency.png, ingest_rate.png,",
            "index_bytes.png, cold_cost.png.", "",
            table("Find one message by key", ["system", "messages", "p50 ms", "p99 ms", "GETs/lookup",
                                              "USD per million lookups (GETs)"], rows)]
    ing = []
    for s in sizes:
        r = results["sizes"][str(s)]
        for name, rr in (("mqindex", r["mqindex"]), ("PostgreSQL COPY + CREATE INDEX", r["postgres"]),
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
    try:
        _url, weed = store_or_seaweedfs(None, work, "report")
        from storage_tier import open_store

        for n in sizes:
            t0 = int(time.time() * 1000)
            recs = make_records(n, t0)
            rng = random.Random(n)
            probes = [rng.randrange(n) for _ in range(args.lookups)]
            r: dict[str, Any] = {}
            started = time.perf_counter()
            r["mqindex"] = run_mqindex(work / f"mq{n}", weed.store_url("mqindex", f"index-{n}"), recs, probes)
            progress(f"mqindex {n:,}", n, n, started)
            store = open_store(weed.store_url("mqindex", f"topic-{n}"))
            segs, seg_rate = write_topic(store, recs)
            lat, gets = [], []
            for i in probes[:args.scans]:
                t = time.perf_counter()
                off, g = scan_for(store, segs, recs[i][5][0])
                lat.append(time.perf_counter() - t)
                gets.append(g)
                assert off == recs[i][2]
            store.close()
            r["scan"] = {**lat_stats(lat), "gets": sum(gets) / len(gets), "ingest_per_s": seg_rate,
                         "samples": len(lat)}
            progress(f"full scans {n:,}", len(lat), args.scans, started)
            r["postgres"] = run_postgres(recs, probes, f"mqindex_report_{os.getpid()}")
            progress(f"postgres {n:,}", n, n, started)
            r["rocksdb"] = run_rocksdb(work / f"rocks{n}", recs, probes)
            progress(f"rocksdb {n:,}", n, n, started)
            results["sizes"][str(n)] = r
            del recs
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
