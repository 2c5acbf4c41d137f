"""Storage tier benchmark: ranged GET latency (4 KiB, 64 KiB, 1 MiB) and PUT throughput per backend,
each next to its raw peer in the same run:

    local       vs raw disk (os.pread on an open file; write + fsync)
    s3          vs raw boto3 requests against the same SeaweedFS
    sqlite      vs one blob in one row read with substr()
    postgresql  vs one blob in one row read with substring()

Run: `mqindex bench storage` or `python -m bench.storage_tier [--gets N] [--pg DSN]`.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from bench.common import emit, percentile, save_results, table
from storage_tier import BlobStore, open_store
from storage_tier.seaweedfs_server import SeaweedFS

KiB, MiB = 1024, 1024 * 1024
SIZES = [("4 KiB", 4 * KiB), ("64 KiB", 64 * KiB), ("1 MiB", MiB)]


def lat(fn: Callable[[int, int], bytes], blob_size: int, size: int, n: int, rng: random.Random) -> list[float]:
    out = []
    for _ in range(n):
        start = rng.randrange(0, blob_size - size)
        t = time.perf_counter()
        data = fn(start, start + size)
        out.append(time.perf_counter() - t)
        assert len(data) == size
    return out


def put_rate(fn: Callable[[str, bytes], None], count: int, size: int) -> float:
    payload = os.urandom(size)
    t = time.perf_counter()
    for i in range(count):
        fn(f"put/{i}", payload)
    return count * size / MiB / (time.perf_counter() - t)


class RawPeer:
    """The same reads and writes without the storage tier, for the ratio."""

    def __init__(self, backend: str, store: BlobStore, workdir: Path, pg_dsn: str | None) -> None:
        self.backend = backend
        self.store = store
        self.workdir = workdir
        self.pg_dsn = pg_dsn
        self.name = {"local": "raw disk", "s3": "raw boto3", "sqlite": "single-row SQLite",
                     "postgresql": "single-row PostgreSQL"}[backend]

    def setup(self, data: bytes) -> None:
        if self.backend == "local":
            path = self.workdir / "raw.bin"
            path.write_bytes(data)
            self.fd = os.open(path, os.O_RDONLY)
        elif self.backend == "s3":
            s = self.store
            s.client.put_object(Bucket=s.bucket, Key=s.prefix + "raw", Body=data)  # type: ignore[attr-defined]
        elif self.backend == "sqlite":
            self.conn = sqlite3.connect(self.workdir / "raw.sqlite", isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("CREATE TABLE b (k TEXT PRIMARY KEY, v BLOB)")
            self.conn.execute("INSERT INTO b VALUES ('raw', ?)", (data,))
        else:
            import psycopg

            self.pconn = psycopg.connect(self.pg_dsn, autocommit=True)
            self.table = f"bench_raw_{uuid.uuid4().hex[:8]}"
            self.pconn.execute(f"CREATE TABLE {self.table} (k TEXT PRIMARY KEY, v BYTEA)")
            self.pconn.execute(f"ALTER TABLE {self.table} ALTER COLUMN v SET STORAGE EXTERNAL")
            self.pconn.execute(f"INSERT INTO {self.table} VALUES ('raw', %s)", (data,))

    def get(self, start: int, end: int) -> bytes:
        if self.backend == "local":
            return os.pread(self.fd, end - start, start)
        if self.backend == "s3":
            s = self.store
            return s.client.get_object(Bucket=s.bucket, Key=s.prefix + "raw",  # type: ignore[attr-defined]
                                       Range=f"bytes={start}-{end - 1}")["Body"].read()
        if self.backend == "sqlite":
            q = "SELECT substr(v, ?, ?) FROM b WHERE k='raw'"
            return self.conn.execute(q, (start + 1, end - start)).fetchone()[0]
        return bytes(self.pconn.execute(f"SELECT substring(v from %s for %s) FROM {self.table} WHERE k='raw'",
                                        (start + 1, end - start)).fetchone()[0])

    def put(self, key: str, data: bytes) -> None:
        if self.backend == "local":
            path = self.workdir / "rawput"
            with open(path, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        elif self.backend == "s3":
            s = self.store
            s.client.put_object(Bucket=s.bucket, Key=s.prefix + "raw-" + key, Body=data)  # type: ignore[attr-defined]
        elif self.backend == "sqlite":
            self.conn.execute("INSERT OR REPLACE INTO b VALUES (?, ?)", (key, data))
        else:
            self.pconn.execute(f"INSERT INTO {self.table} VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v",
                               (key, data))

    def close(self) -> None:
        if self.backend == "local":
            os.close(self.fd)
        elif self.backend == "sqlite":
            self.conn.close()
        elif self.backend == "postgresql":
            self.pconn.execute(f"DROP TABLE {self.table}")
            self.pconn.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mqindex bench storage", description=__doc__.split("\n")[0])
    ap.add_argument("--gets", type=int, default=200, help="ranged GETs per size and backend (1 MiB: a quarter)")
    ap.add_argument("--puts", type=int, default=16, help="4 MiB PUTs per backend")
    ap.add_argument("--blob-mib", type=int, default=64, help="size of the blob read from")
    ap.add_argument("--pg", default=os.environ.get("MQINDEX_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test"))
    ap.add_argument("--backends", default="local,s3,sqlite,postgresql")
    args = ap.parse_args(argv)

    backends = args.backends.split(",")
    work = Path(tempfile.mkdtemp(prefix="mqindex-bench-storage-"))
    weed = SeaweedFS(work / "seaweedfs").start(bucket="bench") if "s3" in backends else None
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    urls = {
        "local": f"file://{work}/local",
        "s3": weed.store_url("bench", "storage") if weed else "",
        "sqlite": f"sqlite:///{work}/blobs.sqlite",
        "postgresql": f"{args.pg}{'&' if '?' in args.pg else '?'}schema={schema}",
    }
    blob = os.urandom(args.blob_mib * MiB)
    rows, results = [], {}
    try:
        for backend in backends:
            store = open_store(urls[backend])
            peer = RawPeer(backend, store, work, args.pg)
            print(f"[bench] storage: {backend}: writing the {args.blob_mib} MiB blob", file=sys.stderr, flush=True)
            store.put("blob", blob)
            peer.setup(blob)
            for label, size in SIZES:
                n = args.gets if size < MiB else max(10, args.gets // 4)
                ours = lat(lambda a, b, s=store: s.get("blob", a, b), len(blob), size, n, random.Random(1))
                raw = lat(peer.get, len(blob), size, n, random.Random(1))
                p50, p99, r50 = percentile(ours, 50), percentile(ours, 99), percentile(raw, 50)
                rows.append([backend, f"GET {label}", p50 * 1e3, p99 * 1e3, peer.name, r50 * 1e3,
                             percentile(raw, 99) * 1e3, p50 / r50])
                results[f"{backend}.get.{size}"] = {"p50_ms": p50 * 1e3, "p99_ms": p99 * 1e3, "peer_p50_ms": r50 * 1e3}
                print(f"[bench] storage: {backend}: GET {label} x{n} done", file=sys.stderr, flush=True)
            ours_put = put_rate(store.put, args.puts, 4 * MiB)
            raw_put = put_rate(peer.put, args.puts, 4 * MiB)
            rows.append([backend, "PUT 4 MiB (MiB/s)", ours_put, float("nan"), peer.name, raw_put, float("nan"),
                         ours_put / raw_put])
            results[f"{backend}.put_mib_s"] = {"ours": ours_put, "peer": raw_put}
            peer.close()
            if backend == "postgresql":
                store._conn().execute(f'DROP SCHEMA "{schema}" CASCADE')  # type: ignore[attr-defined]
            store.close()
    finally:
        if weed:
            weed.stop(grace=5)
    emit(table("Storage tier: ranged GET latency (ms) and PUT throughput, each next to its raw peer",
               ["backend", "operation", "p50", "p99", "peer", "peer p50", "peer p99", "ratio (ours/peer)"], rows))
    emit("ratio: for GETs ours p50 / peer p50 (1.0 = no overhead); for PUTs ours MiB/s / peer MiB/s.")
    save_results("storage_tier", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
