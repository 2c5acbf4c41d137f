"""Broker benchmark, each figure next to its raw peer measured in the same run:

1. produce throughput (MB/s of 1 KiB values, acknowledged after the WAL fsync) vs raw append + fsync of
   the same disk with the same request sizes (one writer, one fsync per request-sized write);
2. object PUT requests and bytes written per GB ingested with 1, 100 and 1000 partitions (scaled down
   with --gb, reported per GB): the upload path should cost the same whatever the partition count;
3. cold read of one partition from objects (fresh node, empty caches each time) vs raw 1 MiB ranged GETs of
   the same objects on SeaweedFS (measured before and after the reads, averaged): the broker's whole-record
   fetch in process, the HTTP whole-record fetch and a confluent-kafka consumer against a fresh
   `mqindex serve` process, and the stream read (records as stored).

Run: `mqindex bench broker` or `python -m bench.broker [--produce-mb 256] [--gb 0.25] [--cold-mb 64]`.
SeaweedFS is started for the run unless --store gives an S3 URL.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import emit, save_results, served_collector, table
from bench.serve_process import ServeProcess
from broker.node import BrokerNode
from broker.partitions.client_messages import InMessage
from storage_tier import open_store

KiB, MiB = 1024, 1024 * 1024
RECORD = 1 * KiB


def _open(work: Path, name: str, store_url: str, **kw: Any) -> BrokerNode:
    kw.setdefault("upload_interval_s", 3600.0)
    kw.setdefault("maintenance_interval_s", 0)
    return BrokerNode.open(work / name, store_url, f"sqlite:///{work}/{name}-meta.sqlite", **kw)


def _produce(node: BrokerNode, topic: str, partitions: int, total_bytes: int, per_request: int,
             threads: int) -> tuple[float, int]:
    """Produce `total_bytes` of 1 KiB values in requests of `per_request` records from `threads` threads,
    each request to one partition (cycling). Returns (seconds, bytes)."""
    requests = max(1, total_bytes // (RECORD * per_request))
    counter = iter(range(requests))
    lock = threading.Lock()
    value = os.urandom(RECORD)
    errors: list[BaseException] = []

    def run() -> None:
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            try:
                node.produce(topic, [InMessage(value, partition=i % partitions) for _ in range(per_request)])
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                return

    ts = [threading.Thread(target=run) for _ in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return elapsed, requests * per_request * RECORD


def raw_append_fsync(directory: Path, total_bytes: int, write_size: int) -> float:
    """MB/s of write(write_size) + fsync in a loop on one file (the disk's ack-after-fsync bandwidth)."""
    path = directory / "raw-append.bin"
    buf = os.urandom(write_size)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    n = max(1, total_bytes // write_size)
    try:
        t0 = time.perf_counter()
        for _ in range(n):
            os.write(fd, buf)
            os.fsync(fd)
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
        path.unlink()
    return n * write_size / MiB / elapsed


def bench_produce(work: Path, store_url: str, mb: int, per_request: int, threads: int) -> dict[str, Any]:
    # the raw peer is measured before and after the broker run and averaged: the disk is shared and noisy
    raw_before = raw_append_fsync(work, min(mb, 128) * MiB, per_request * RECORD)
    node = _open(work, "produce", store_url, upload_interval_s=1.0)
    try:
        node.create_topic("p", threads)
        node.produce("p", [InMessage(b"warm", partition=i) for i in range(threads)])
        fsyncs0 = node.wal.fsyncs
        secs, nbytes = _produce(node, "p", threads, mb * MiB, per_request, threads)
        fsyncs = node.wal.fsyncs - fsyncs0
    finally:
        node.close()
    broker = nbytes / MiB / secs
    raw_after = raw_append_fsync(work, min(mb, 128) * MiB, per_request * RECORD)
    raw = (raw_before + raw_after) / 2
    group = nbytes / max(fsyncs, 1)
    raw_group = raw_append_fsync(work, min(mb, 128) * MiB, max(RECORD, int(group) // 4096 * 4096))
    return {"broker_mb_s": broker, "raw_mb_s": raw, "ratio": broker / raw, "request_bytes": per_request * RECORD,
            "threads": threads, "fsyncs": fsyncs, "bytes_per_fsync": group, "raw_group_mb_s": raw_group,
            "ratio_group": broker / raw_group, "mb": nbytes / MiB, "seconds": secs, "fsyncs_s": fsyncs / secs,
            "raw_before_mb_s": raw_before, "raw_after_mb_s": raw_after}


def bench_puts(work: Path, store_url: str, gb: float, partitions: list[int], threshold: int) -> list[dict[str, Any]]:
    out = []
    for n in partitions:
        node = _open(work, f"puts-{n}", store_url, upload_threshold=threshold)
        try:
            node.create_topic("t", n)
            node.flush()  # the partition state records of the new topic: not ingested data
            before = node.store.meter.snapshot()
            secs, nbytes = _produce(node, "t", n, int(gb * 1024 * MiB), 32, 4)
            node.flush()
            d = node.store.meter.snapshot() - before
            uploads = node.uploader.uploads
        finally:
            node.close()
        per_gb = 1024 * MiB / nbytes
        out.append({"partitions": n, "ingested_mb": nbytes / MiB, "put_requests": d["PUT"],
                    "puts_per_gb": d["PUT"] * per_gb, "bytes_per_gb": d.bytes_in * per_gb,
                    "write_amplification": d.bytes_in / nbytes, "uploads": uploads, "seconds": secs})
    return out


def _serve_process(work: Path, name: str, store_url: str) -> ServeProcess:
    """A fresh `mqindex serve` process on an existing node's data (empty caches), HTTP and Kafka listeners."""
    return ServeProcess(work / name, ["--store", store_url, "--metadata", f"sqlite:///{work}/{name}-meta.sqlite",
                                      "--upload-interval-s", "3600"], work / f"{name}-serve.log", kafka=True,
                        start_timeout_s=120)


def raw_ranged_gets(store_url: str, keys: list[str]) -> tuple[float, int]:
    """Seconds and bytes of reading these objects whole in 1 MiB ranged GETs, one after the other."""
    store = open_store(store_url)
    try:
        t0 = time.perf_counter()
        raw = 0
        for k in keys:
            size = store.size(k)
            for start in range(0, size, MiB):
                raw += len(store.get(k, start, min(size, start + MiB)))
        return time.perf_counter() - t0, raw
    finally:
        store.close()


def _http_fetch(server: ServeProcess, end: int) -> tuple[float, int]:
    """Seconds and value bytes of paging the partition through GET .../messages?max=1000 (JSON parsed, values
    decoded), as a client that pipelines does: a second thread asks for the next page as soon as a page's
    X-Next-Offset header has come, while this one parses the page before (at most two pages wait). The client is
    urllib3, the HTTP stack the raw peer's boto3 reads through: httpx took 3x its CPU per 1.5 MB page (2.3 ms
    against 0.8), all of it added to the page loop's time."""
    import queue
    import threading

    import orjson
    import pybase64
    import urllib3

    pages: queue.Queue[bytes | BaseException | None] = queue.Queue(maxsize=2)
    http = urllib3.PoolManager(timeout=urllib3.Timeout(120))

    def fetch_pages() -> None:
        pos = 0
        try:
            while pos < end:
                r = http.request("GET", f"{server.url}/v1/topics/c/partitions/0/messages",
                                 fields={"offset": pos, "max": 1000})
                if r.status != 200:
                    raise RuntimeError(f"HTTP fetch at offset {pos}: {r.status} {r.data[:200]!r}")
                pos = int(r.headers["X-Next-Offset"])
                pages.put(r.data)
            pages.put(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the parsing thread, which raises it
            pages.put(exc)

    got = 0
    try:
        t0 = time.perf_counter()
        fetcher = threading.Thread(target=fetch_pages, name="bench-http-pages", daemon=True)
        fetcher.start()
        while (data := pages.get()) is not None:
            if isinstance(data, BaseException):
                raise data
            for m in orjson.loads(data)["messages"]:
                v = m["value"] or ""
                got += len(pybase64.b64decode(v)) if m["encoding"] == "base64" else len(v.encode())
        fetcher.join()
        return time.perf_counter() - t0, got
    finally:
        http.clear()


def _kafka_fetch(server: ServeProcess, end: int) -> tuple[float, int]:
    """Seconds and value bytes of a confluent-kafka (librdkafka) consumer reading partition 0 from offset 0."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}", "group.id": f"bench-{uuid.uuid4().hex}",
                  "enable.auto.commit": False, "max.partition.fetch.bytes": MiB, "fetch.max.bytes": 64 * MiB})
    try:
        t0 = time.perf_counter()
        c.assign([TopicPartition("c", 0, 0)])
        got, last = 0, -1
        deadline = time.monotonic() + 600
        while last < end - 1:
            if time.monotonic() > deadline:
                raise RuntimeError(f"kafka consumer stopped at offset {last} of {end}")
            # a short timeout: consume() returns only once it has 1000 messages or the timeout passed, so a
            # long one would add itself to the time of the last (partial) batch
            for m in c.consume(1000, 0.01):
                if m.error():
                    raise RuntimeError(f"kafka consumer: {m.error()}")
                got += len(m.value() or b"")
                last = m.offset()
        return time.perf_counter() - t0, got
    finally:
        c.close()


def bench_cold_read(work: Path, store_url: str, mb: int) -> dict[str, Any]:
    node = _open(work, "cold", store_url, upload_threshold=16 * MiB)
    try:
        node.create_topic("c", 1)
        _produce(node, "c", 1, mb * MiB, 64, 2)
        node.flush()
        end = node.partition_info("c", 0)["end_offset"]
        keys = [node.meta.object_key(o) for o in node.meta.committed_objects()]
    finally:
        node.close()
    raw_before_s, raw = raw_ranged_gets(store_url, keys)
    node = _open(work, "cold", store_url)  # fresh caches: every byte comes from the store
    with served_collector():  # as `mqindex serve` sets it once its node is open
        try:
            before = node.store.meter.snapshot()
            t0 = time.perf_counter()
            pos, got = 0, 0
            while pos < end:
                msgs, pos = node.fetch("c", 0, pos, 1000)
                got += sum(len(m.value or b"") for m in msgs)
            fetch_s = time.perf_counter() - t0
            d = node.store.meter.snapshot() - before
            # the stream level (objects -> stream records, no Kafka record parsing)
            node.block_cache.__init__(node.block_cache.max_bytes)
            sid = node.partition_info("c", 0)["data_stream"]
            node.reader._readers.clear()
            t0 = time.perf_counter()
            pos, stream_bytes = 0, 0
            while pos < end:
                recs = node.reader.read(sid, pos, end, 4 * MiB)
                stream_bytes += sum(len(r.payload) for r in recs)
                pos = recs[-1].last_offset
            stream_s = time.perf_counter() - t0
        finally:
            node.close()
    server = _serve_process(work, "cold", store_url)  # a fresh process: empty caches
    try:
        http_s, http_bytes = _http_fetch(server, end)
    finally:
        server.stop()
    server = _serve_process(work, "cold", store_url)
    try:
        kafka_s, kafka_bytes = _kafka_fetch(server, end)
    finally:
        server.stop()
    raw_after_s, raw_after = raw_ranged_gets(store_url, keys)
    raw_mb_s = (raw / raw_before_s + raw_after / raw_after_s) / 2 / MiB

    def rate(nbytes: int, secs: float) -> float:
        return nbytes / MiB / secs

    return {"fetch_mb_s": rate(got, fetch_s), "stream_mb_s": rate(stream_bytes, stream_s),
            "http_mb_s": rate(http_bytes, http_s), "kafka_mb_s": rate(kafka_bytes, kafka_s),
            "raw_get_mb_s": raw_mb_s, "raw_before_mb_s": rate(raw, raw_before_s),
            "raw_after_mb_s": rate(raw_after, raw_after_s),
            "fetch_ratio": rate(got, fetch_s) / raw_mb_s, "stream_ratio": rate(stream_bytes, stream_s) / raw_mb_s,
            "http_ratio": rate(http_bytes, http_s) / raw_mb_s, "kafka_ratio": rate(kafka_bytes, kafka_s) / raw_mb_s,
            "gets": d["GET"], "mb": got / MiB, "objects": len(keys)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mqindex bench broker", description=__doc__.split("\n\n")[0])
    ap.add_argument("--produce-mb", type=int, default=256, help="MiB produced for the throughput figure")
    ap.add_argument("--request-records", type=int, default=64, help="1 KiB records per produce request")
    ap.add_argument("--threads", type=int, default=4, help="producer threads (one partition each)")
    ap.add_argument("--gb", type=float, default=0.25, help="GB ingested per partition count (reported per GB)")
    ap.add_argument("--partitions", default="1,100,1000")
    ap.add_argument("--upload-threshold-mb", type=int, default=32)
    ap.add_argument("--cold-mb", type=int, default=64)
    ap.add_argument("--store", help="S3 URL of an existing store (default: start SeaweedFS for the run)")
    ap.add_argument("--dir", help="work directory (default: a temporary one, removed after)")
    ap.add_argument("--only", choices=["produce", "puts", "cold"], action="append")
    args = ap.parse_args(argv)
    only = set(args.only or ["produce", "puts", "cold"])
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-broker-"))
    work.mkdir(parents=True, exist_ok=True)
    weed = None
    try:
        store_url = args.store
        if store_url is None:
            from storage_tier.seaweedfs_server import SeaweedFS

            weed = SeaweedFS(work / "seaweedfs").start(bucket="bench")
            store_url = weed.store_url("bench", f"broker-{uuid.uuid4().hex[:8]}")
        results: dict[str, Any] = {}
        if "produce" in only:
            r = bench_produce(work, store_url, args.produce_mb, args.request_records, args.threads)
            results["produce"] = r
            emit(table("Produce throughput, 1 KiB records, ack after fsync",
                       ["", "MB/s", "write per fsync", "ratio broker/raw"],
                       [["broker produce", r["broker_mb_s"], f"{r['bytes_per_fsync'] / KiB:.0f} KiB (group commit, "
                         f"{r['fsyncs_s']:.0f} fsyncs/s)", "-"],
                        ["raw append+fsync, request size (mean of before/after: "
                         f"{r['raw_before_mb_s']:.0f}/{r['raw_after_mb_s']:.0f})", r["raw_mb_s"],
                         f"{r['request_bytes'] / KiB:.0f} KiB", r["ratio"]],
                        ["raw append+fsync, group size", r["raw_group_mb_s"],
                         f"{r['bytes_per_fsync'] / KiB:.0f} KiB", r["ratio_group"]]]))
        if "puts" in only:
            rows = bench_puts(work, store_url, args.gb, [int(x) for x in args.partitions.split(",")],
                              args.upload_threshold_mb * MiB)
            results["puts"] = rows
            base = rows[0]["puts_per_gb"]
            emit(table(f"Object PUTs per GB ingested ({args.gb} GB each, upload threshold "
                       f"{args.upload_threshold_mb} MiB)",
                       ["partitions", "PUT requests", "PUTs/GB", "bytes written/GB (MiB)", "write amp.",
                        "uploads", "PUTs/GB vs 1 partition"],
                       [[r["partitions"], r["put_requests"], r["puts_per_gb"], r["bytes_per_gb"] / MiB,
                         r["write_amplification"], r["uploads"], r["puts_per_gb"] / base] for r in rows]))
        if "cold" in only:
            r = bench_cold_read(work, store_url, args.cold_mb)
            results["cold"] = r
            emit(table(f"Cold read of one partition ({r['mb']:.0f} MiB in {r['objects']} objects) from SeaweedFS, "
                       "fresh caches for each reader",
                       ["", "MB/s", "ratio vs raw GET"],
                       [["broker fetch (whole Kafka records, in process)", r["fetch_mb_s"], r["fetch_ratio"]],
                        ["HTTP whole-record fetch (mqindex serve, pages of 1000)", r["http_mb_s"], r["http_ratio"]],
                        ["Kafka fetch (confluent-kafka consumer, mqindex serve)", r["kafka_mb_s"], r["kafka_ratio"]],
                        ["stream read (records as stored)", r["stream_mb_s"], r["stream_ratio"]],
                        ["raw 1 MiB ranged GETs (mean of before/after: "
                         f"{r['raw_before_mb_s']:.0f}/{r['raw_after_mb_s']:.0f})", r["raw_get_mb_s"], 1.0]]))
        path = save_results("broker", results)
        emit(f"raw figures: {path}")
    finally:
        if weed is not None:
            weed.stop()
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
