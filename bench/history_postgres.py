"""The PostgreSQL B-tree peer of `mqindex bench history`: the same messages as rows of (key fingerprint, file,
position, time) in a table with a B-tree on the fingerprint, loaded with COPY (binary, built column-wise with
numpy) and looked up by fingerprint from one connection with a prepared statement, as a service in front of it
would.

The fingerprint is mqindex's own (64-bit xxh3 of `topic#key`, stored as a signed bigint); the file is the
message's file number in the mqindex history as written (its hour, or its 1,000,000 items), the position its
place in that file. Each history gets its own table in a schema made for the run, dropped afterwards.
"""

from __future__ import annotations

import resource
import struct
import time
from typing import Any

import numpy as np
import psycopg
import xxhash

from bench.common import percentile

PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"
_ROW = np.dtype([("n", ">i2"), ("l1", ">i4"), ("fp", ">i8"), ("l2", ">i4"), ("file", ">i4"), ("l3", ">i4"),
                 ("pos", ">i4"), ("l4", ">i4"), ("t", ">i8")])
_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def fingerprints(keys: list[str], topic: str = "orders") -> np.ndarray:
    """mqindex's fingerprints of `topic#key` as signed int64."""
    h = xxhash.xxh3_64_intdigest
    prefix = f"{topic}#"
    return np.fromiter((h((prefix + k).encode()) for k in keys), dtype=np.uint64, count=len(keys)).view(np.int64)


def _keys(lo: int, hi: int) -> list[str]:
    ids = np.arange(lo, hi, dtype=np.int64)
    keys = list(map("u{}".format, range(lo, hi)))
    first = -lo % 10
    keys[first::10] = map("r{}".format, (ids[first::10] % 1000).tolist())
    return keys


def _copy_rows(lo: int, hi: int, per_file: int, t0: int, step: float) -> bytes:
    ids = np.arange(lo, hi, dtype=np.int64)
    rows = np.empty(hi - lo, dtype=_ROW)
    rows["n"] = 4
    rows["l1"], rows["l2"], rows["l3"], rows["l4"] = 8, 4, 4, 8
    rows["fp"] = fingerprints(_keys(lo, hi))
    rows["file"] = ids // per_file
    rows["pos"] = ids % per_file
    rows["t"] = t0 + (ids * step).astype(np.int64)
    return rows.tobytes()


class PostgresPeer:
    """Callable per history: (n, days, per_file, t0, present keys, absent keys) -> figures."""

    def __init__(self, dsn: str, lookups_p99_samples: int = 2000) -> None:
        self.dsn = dsn
        self.schema = f"bench_history_{int(time.time())}"
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.conn.execute(f"CREATE SCHEMA {self.schema}")
        self.samples = lookups_p99_samples

    def close(self) -> None:
        try:
            self.conn.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
        finally:
            self.conn.close()

    def __call__(self, n: int, days: float, per_file: int, t0: int, present: list[str],
                 absent: list[str]) -> dict[str, Any]:
        table = f"{self.schema}.h_{n}_{str(days).replace('.', '_')}"
        c = self.conn
        c.execute(f"CREATE UNLOGGED TABLE {table} (fp bigint NOT NULL, file int NOT NULL, pos int NOT NULL, "
                  f"t bigint NOT NULL)")
        step = days * 86_400_000 / n
        started = time.perf_counter()
        chunk = 1_000_000
        with c.cursor() as cur, cur.copy(f"COPY {table} (fp, file, pos, t) FROM STDIN WITH (FORMAT binary)") as cp:
            cp.write(_HEADER)
            for lo in range(0, n, chunk):
                cp.write(_copy_rows(lo, min(n, lo + chunk), per_file, t0, step))
            cp.write(struct.pack(">h", -1))
        copy_s = time.perf_counter() - started
        t = time.perf_counter()
        c.execute(f"CREATE INDEX ON {table} USING btree (fp)")
        c.execute(f"ANALYZE {table}")
        index_s = time.perf_counter() - t
        sizes = c.execute(f"SELECT pg_table_size('{table}'), pg_indexes_size('{table}')").fetchone()
        assert sizes is not None
        out: dict[str, Any] = {"copy_s": round(copy_s, 1), "index_s": round(index_s, 1),
                               "rows_per_s": round(n / (copy_s + index_s)), "table_bytes": sizes[0],
                               "index_bytes": sizes[1], "total_bytes": sizes[0] + sizes[1],
                               "shared_buffers": c.execute("SHOW shared_buffers").fetchone()[0]}  # type: ignore[index]
        query = f"SELECT file, pos, t FROM {table} WHERE fp = %s ORDER BY t DESC LIMIT 10"
        cpu0 = _cpu()
        for kind, keys in (("present", present), ("absent", absent)):
            fps = fingerprints(keys).tolist()
            lat = []
            found = 0
            with c.cursor() as cur:
                for fp in fps:
                    t = time.perf_counter()
                    cur.execute(query, (fp,), prepare=True)
                    found += len(cur.fetchall())
                    lat.append(time.perf_counter() - t)
            out[kind] = {"p50_ms": percentile(lat, 50) * 1e3, "p99_ms": percentile(lat, 99) * 1e3,
                         "found": found / len(keys)}
        out["cpu_ms"] = 1e3 * (_cpu() - cpu0) / (len(present) + len(absent))
        c.execute(f"DROP TABLE {table}")
        return out
