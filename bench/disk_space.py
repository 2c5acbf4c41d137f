"""Disk-space guard benchmark: what the free-space floor costs on the write path, next to its peer.

1. WAL appends of 1 KiB from 1 and from 16 threads (each acknowledged after the group commit's fsync), with
   the free-space check every append makes (`DiskSpace.check_write`: far above the floor a statvfs reading at
   most 20 ms old, less the writes checked since; near it one statvfs a write) vs without it;
2. one `check_write` vs one raw `os.statvfs` of the same folder.

Run: `mqindex bench disk_space [--appends 3000] [--dir DIR]` (DIR: the filesystem to measure, default a temp
folder).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import emit, save_results, table
from broker.streams.disk_space import DiskSpace
from broker.streams.wal import Wal


def _appends(wal: Wal, guard: Callable[[int], None] | None, n: int, threads: int) -> float:
    """Appends per second: `n` appends of 1 KiB split over `threads` threads."""
    body = os.urandom(1024)

    def run(k: int) -> None:
        for _ in range(k):
            if guard is not None:
                guard(len(body))
            wal.append(body)

    per = n // threads
    workers = [threading.Thread(target=run, args=(per,)) for _ in range(threads)]
    started = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return per * threads / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mqindex bench disk_space", description=__doc__)
    ap.add_argument("--appends", type=int, default=3000)
    ap.add_argument("--dir", help="a folder on the filesystem to measure (default: a temp folder)")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="mqindex-bench-disk-", dir=args.dir))
    try:
        disk = DiskSpace(min_free_bytes=0)
        disk.watch("wal", work / "wal")
        rows = []
        results: dict[str, float] = {}
        for threads in (1, 16):
            with Wal.open(work / "wal") as wal:
                _appends(wal, None, min(args.appends, 300), threads)  # warm up
                # alternated three times, the median of each: the machine's fsync latency drifts
                plains, guardeds = [], []
                for _ in range(3):
                    plains.append(_appends(wal, None, args.appends, threads))
                    guardeds.append(_appends(wal, lambda n: disk.check_write("wal", n), args.appends, threads))
                plain, guarded = sorted(plains)[1], sorted(guardeds)[1]
            rows.append([f"WAL appends/s, {threads} thread(s)", guarded, plain, guarded / plain])
            results[f"appends_{threads}_guarded"] = guarded
            results[f"appends_{threads}_plain"] = plain
        n = 100_000
        started = time.perf_counter()
        for _ in range(n):
            disk.check_write("wal", 1024)
        check_us = (time.perf_counter() - started) / n * 1e6
        wal_dir = str(work / "wal")
        started = time.perf_counter()
        for _ in range(n):
            os.statvfs(wal_dir)
        statvfs_us = (time.perf_counter() - started) / n * 1e6
        rows.append(["µs per free-space check", check_us, statvfs_us, check_us / statvfs_us])
        results.update(check_us=check_us, statvfs_us=statvfs_us)
        emit(table("Free-space floor on the write path", ["measure", "with the guard", "peer (no guard / raw "
                                                                                     "statvfs)", "ratio"], rows))
        save_results("disk_space", results)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
