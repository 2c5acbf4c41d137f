"""`mqindex bench history --filter-files F --filter-keys K --filter-cache-bytes B`: the key filters of a history
alone, at a geometry too large to write quickly (10^8 messages over 1 day: 92 files of about 980,000 distinct
keys each, 203 MB of filters), asked as a lookup asks them.

F filter files of K distinct random fingerprints each are built (index_file.key_filter.encode_filter) into an
index directory's `uploaded/` folder, then a service's FilterCache bounded to B bytes is asked, cold, for
fingerprints as key lookups with no time range ask: an absent key asks every file's filter, a present key asks
every file's (the lookup asks all files in range before it reads the one that says maybe). Printed per mode
(filters read into memory when evicted, as before; memory-mapped), in the same run: microseconds and CPU
microseconds per lookup, p50/p99, bytes held, filters held. No object store is involved (the filters are local,
as after the first lookup of a history).
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from bench.common import percentile
from bench.history import cpu_s


def build(idx: Path, files: int, keys: int, seed: int = 1) -> list[np.ndarray]:
    """F filter files in idx/uploaded/; one present fingerprint per file, for lookups of keys present."""
    from index_file.key_filter import encode_filter
    from index_service.state_folders import StateFolders

    folders = StateFolders(idx)
    rng = np.random.default_rng(seed)
    present = []
    for i in range(files):
        fps = rng.integers(0, np.iinfo(np.uint64).max, size=keys, dtype=np.uint64)
        (folders.root / "uploaded" / f"{i:016d}.filter").write_bytes(encode_filter(fps))
        present.append(fps[:1000].copy())
    return present


def lookups(idx: Path, files: int, cache_bytes: int, mapped: bool, fps: list[int]) -> dict[str, Any]:
    from index_service.key_filters import FilterCache
    from index_service.lookup_stats import LookupStats
    from index_service.model import FileState
    from index_service.state_folders import StateFolders

    cache = FilterCache(StateFolders(idx), None, cache_bytes, LookupStats())
    if not mapped:
        cache.map_min_bytes = 1 << 62
    mfs = [SimpleNamespace(stem=f"{i:016d}", state=FileState.UPLOADED, remote_key=None, location=f"{i:016d}")
           for i in range(files)]
    lat: list[float] = []
    maybe = 0
    cpu0 = cpu_s()
    for fp in fps:
        t = time.perf_counter()
        maybe += sum(cache.may_contain(mf, fp) for mf in mfs)  # type: ignore[arg-type]
        lat.append(time.perf_counter() - t)
    cpu = cpu_s() - cpu0
    return {"us_p50": percentile(lat, 50) * 1e6, "us_p99": percentile(lat, 99) * 1e6,
            "cpu_us": 1e6 * cpu / len(fps), "held": cache.bytes_held, "filters_held": len(cache), "maybe": maybe}


def run(work: Path, files: int, keys: int, cache_bytes: int, count: int) -> int:
    import os

    idx = work / "filters"
    t = time.perf_counter()
    present = build(idx, files, keys)
    total = sum(p.stat().st_size for p in (idx / "uploaded").glob("*.filter"))
    print(f"[bench] {files} filter files of {keys:,} keys ({total / 1e6:.1f} MB) built in "
          f"{time.perf_counter() - t:.1f} s; bound {cache_bytes:,} bytes; load {os.getloadavg()}", flush=True)
    rng = np.random.default_rng(2)
    asks = {"present": [int(present[i % files][i // files % 1000]) for i in range(count)],
            "absent": [int(x) for x in rng.integers(0, np.iinfo(np.uint64).max, size=count, dtype=np.uint64)]}
    print(f"  {'filters':<8}{'kind':<9}{'us p50':>10}{'us p99':>10}{'CPU us':>10}{'held MB':>9}{'held':>6}"
          f"{'maybe':>7}")
    for mode, mapped in (("read", False), ("mapped", True)):
        for kind, fps in asks.items():
            r = lookups(idx, files, cache_bytes, mapped, fps)
            print(f"  {mode:<8}{kind:<9}{r['us_p50']:>10.0f}{r['us_p99']:>10.0f}{r['cpu_us']:>10.0f}"
                  f"{r['held'] / 1e6:>9.1f}{r['filters_held']:>6}{r['maybe']:>7}", flush=True)
    print(f"  ({count} lookups each, cold; each asks all {files} filters; load after {os.getloadavg()})")
    return 0
