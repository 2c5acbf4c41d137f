"""Broker compaction benchmark: N partitions uploaded as stream set objects (one per round), then one
compaction cycle. Prints objects and metadata records before/after, compaction MB/s as a ratio of the store's
raw GET+PUT bandwidth measured in the same run, peak traced memory / cache size, GETs and seconds to read one
partition before vs after, and the request cost at S3 prices."""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

from bench.common import emit, progress, save_results, store_or_seaweedfs, table
from broker.compaction import CompactionConfig, Compactor
from broker.metadata.client import MetadataClient
from broker.objects.format import StreamRecord
from broker.streams.stream_reader import StreamReader
from broker.streams.uploader import upload_batch
from storage_tier import open_store

MiB = 1 << 20
PUT_USD, GET_USD = 0.005 / 1000, 0.0004 / 1000


def _cost(snap: Any) -> float:
    return (snap["PUT"] + snap["COPY"]) * PUT_USD + snap["GET"] * GET_USD


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mqindex bench compaction", description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=40, help="uploads (stream set objects) before compaction")
    ap.add_argument("--record-kb", type=int, default=4, help="KiB per partition per upload")
    ap.add_argument("--cache-mb", type=int, default=32)
    ap.add_argument("--store", help="S3 URL of an existing store (default: start SeaweedFS for the run)")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-compaction-"))
    store_url, weed = store_or_seaweedfs(args.store, work, f"compaction-{uuid.uuid4().hex[:8]}")
    try:
        store = open_store(store_url)
        meta = MetadataClient(f"sqlite:///{work}/meta.sqlite", 0)
        meta.register_node()
        sids = meta.create_streams(args.partitions)
        meta.open_streams([(s, 0) for s in sids])
        ends = dict.fromkeys(sids, 0)
        started = time.perf_counter()
        for n in range(args.rounds):
            if n % 10 == 0:
                progress("uploads (stream set objects)", n, args.rounds, started)
            batch = {}
            for s in sids:
                batch[s] = [StreamRecord(s, 0, ends[s], 1, os.urandom(args.record_kb << 10))]
                ends[s] += 1
            upload_batch(batch, store, meta, so_threshold=1 << 40)
        input_bytes = sum(o.size for o in meta.node_objects()[0])
        objects_before, records_before = meta.object_counts(), meta.catch_up() + 1

        def read_one() -> tuple[int, float]:
            before, t0 = store.meter.snapshot(), time.perf_counter()
            StreamReader(store, meta).read(sids[7], 0, ends[sids[7]], 1 << 40)
            return (store.meter.snapshot() - before)["GET"], time.perf_counter() - t0

        gets_before, secs_before = read_one()
        # raw store bandwidth in the same run: PUT then GET of 8 MiB blobs
        blob = os.urandom(8 * MiB)
        t0 = time.perf_counter()
        for i in range(4):
            store.put(f"bench-raw/{i}", blob)
            store.get(f"bench-raw/{i}")
        raw_mb_s = 4 * 8 * 2 / (time.perf_counter() - t0)
        store.delete([f"bench-raw/{i}" for i in range(4)])
        cfg = CompactionConfig(interval_s=0, grace_ms=0, cache_size=args.cache_mb * MiB)
        emit(f"compacting {input_bytes / MiB:.0f} MiB in {objects_before['stream_set_objects']} stream set objects "
             f"(tracemalloc on: it slows Python code, so MB/s is a lower bound)")
        before = store.meter.snapshot()
        tracemalloc.start()
        t0 = time.perf_counter()
        report = Compactor(store, meta, cfg).run_once()
        secs = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        used = store.meter.snapshot() - before
        gets_after, secs_after = read_one()
        objects_after = meta.object_counts()
        n_before, n_after = sum(objects_before.values()), sum(objects_after.values())
        live_records = meta.catch_up() + 1 - records_before
        mb_s = (report.bytes_read + report.bytes_written) / MiB / secs
        results = {"partitions": args.partitions, "rounds": args.rounds, "input_mib": input_bytes / MiB,
                   "objects_before": objects_before, "objects_after": objects_after,
                   "metadata_records_before": records_before, "metadata_records_added": live_records,
                   "seconds": secs, "mb_s": mb_s, "raw_get_put_mb_s": raw_mb_s, "ratio": mb_s / raw_mb_s,
                   "peak_mib": peak / MiB, "cache_mib": args.cache_mb, "gets_before": gets_before,
                   "gets_after": gets_after, "read_s_before": secs_before, "read_s_after": secs_after,
                   "compaction_requests": used.requests, "compaction_usd": _cost(used), "errors": report.errors}
        emit(table(f"Compaction of {args.partitions} partitions, {args.rounds} SSOs, {input_bytes / MiB:.0f} MiB",
                   ["figure", "before", "after", "ratio"],
                   [["stream set objects", objects_before["stream_set_objects"],
                     objects_after["stream_set_objects"], "-"],
                    ["stream objects", objects_before["stream_objects"], objects_after["stream_objects"], "-"],
                    ["objects in all", n_before, n_after, n_after / max(n_before, 1)],
                    ["GETs to read one partition", gets_before, gets_after, gets_after / max(gets_before, 1)],
                    ["seconds to read one partition", secs_before, secs_after, secs_after / secs_before],
                    ["compaction MB/s (read+written) vs raw GET+PUT MB/s", raw_mb_s, mb_s, mb_s / raw_mb_s],
                    ["peak traced MiB vs cache MiB", args.cache_mb, peak / MiB, peak / MiB / args.cache_mb],
                    ["$ of the GETs to read one partition (S3 prices)", gets_before * GET_USD,
                     gets_after * GET_USD, gets_after / max(gets_before, 1)],
                    ["compaction requests $ (S3 prices)", "-", _cost(used), "-"]]))
        emit(f"metadata records: {records_before} before, +{live_records} for the compaction; "
             f"compaction {secs:.1f} s in {report.plans} plans, requests {used.requests}, "
             f"{report.bytes_read / MiB:.0f} MiB read, {report.bytes_written / MiB:.0f} MiB written")
        emit(f"raw figures: {save_results('compaction', results)}")
        meta.close()
        store.close()
    finally:
        if weed is not None:
            weed.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
