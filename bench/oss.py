"""oss:// store benchmark: an oss:// store (S3 API, virtual-hosted requests, through the proxy the tests use
because nothing resolves bucket host names here) next to its peer, an s3:// store (path-style) on the same
SeaweedFS, started with `-s3.domainName` so it takes both forms.

Measured for each: PUT of 4 KiB and of 1 MiB objects, ranged GETs of 4 KiB, HEAD; median latency in ms;
ratio = oss / s3 (1.0 = the same cost).

Run: `mqindex bench oss [--ops 200]`
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import emit, percentile, save_results, table
from storage_tier import BlobStore, open_store
from storage_tier.seaweedfs_server import SeaweedFS

DOMAIN = "oss-local.test"


def _median_ms(n: int, op: Callable[[int], object]) -> float:
    samples = []
    for i in range(n):
        started = time.perf_counter()
        op(i)
        samples.append((time.perf_counter() - started) * 1000)
    return percentile(samples, 50)


def _measure(store: BlobStore, n: int) -> dict[str, float]:
    small, big = os.urandom(4096), os.urandom(1 << 20)
    _median_ms(20, lambda i: store.put(f"warm/{i}", small))  # connections opened, buckets cached
    out = {"put_4k": _median_ms(n, lambda i: store.put(f"s/{i}", small)),
           "put_1m": _median_ms(max(n // 10, 5), lambda i: store.put(f"b/{i}", big)),
           "get_4k_range": _median_ms(n, lambda i: store.get(f"b/{i % max(n // 10, 5)}", 4096 * (i % 200),
                                                              4096 * (i % 200 + 1))),
           "head": _median_ms(n, lambda i: store.size(f"s/{i}"))}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mqindex bench oss", description=__doc__)
    ap.add_argument("--ops", type=int, default=200)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="mqindex-bench-oss-"))
    weed = SeaweedFS(work / "weed", domain_name=DOMAIN)
    try:
        weed.start(bucket="mqindex")
        port = weed.s3_port
        oss = open_store(f"oss://mqindex/oss?endpoint=http://{DOMAIN}:{port}&region=cn-hangzhou"
                         f"&proxy=http://127.0.0.1:{port}")
        s3 = open_store(weed.store_url("mqindex", "s3"))
        results = {"oss": _measure(oss, args.ops), "s3": _measure(s3, args.ops)}
        rows = [[f"{op} median ms", results["oss"][op], results["s3"][op], results["oss"][op] / results["s3"][op]]
                for op in results["oss"]]
        emit(table(f"oss:// (virtual-hosted) vs s3:// (path-style), same SeaweedFS, {args.ops} ops",
                   ["measure", "oss://", "s3://", "ratio oss/s3"], rows))
        save_results("oss", results)
        oss.close()
        s3.close()
    finally:
        weed.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0
