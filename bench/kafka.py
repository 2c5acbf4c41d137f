"""Kafka benchmark: a real `mqindex serve` process with its Kafka listener, each figure next to its peer
measured in the same run.

1. produce: a confluent-kafka (librdkafka) producer, acks=all, linger 5 ms, batches up to --batch-kb,
   1 KiB values, MB/s and the p99 of send-to-acknowledgement latency; HTTP produce (JSON bodies of
   --http-records 1 KiB text values from --http-threads threads, JSON parsing included) into a second
   server; both against raw append + fsync of the same disk at the write size the broker's WAL used
   (bytes per group commit, from the server's `mqindex_wal_group_commits` counter) and at the client's
   batch size (Kafka) or request size (HTTP); those two are measured before the runs and after them, and
   averaged. The WAL's fsyncs per second and bytes per fsync are printed beside them. The Kafka latency is
   librdkafka's own, from produce() to the acknowledgement (`Message.latency()`). The CPU per MiB of the
   server, the client and the S3 server (when started for the run) gives the rate this machine's cores allow
   whatever the disk does: the ceiling of the ratio, printed beside it.
2. cold consume: the server is stopped (records uploaded to objects) and started again (fresh caches), and a
   confluent-kafka consumer reads the whole topic from offset 0; peer: raw 1 MiB ranged GETs of the same
   data objects.

Run: `mqindex bench kafka` or `python -m bench.kafka [--mb 128] [--batch-kb 1024] [--partitions 4]`;
`--transactions` runs the transactions benchmark instead (bench/kafka_txn.py: `[--txn-records 100000]
[--txn-size 100] [--txn-sizes 100,300,1000,3000,10000] [--txn-producers 4]`).
SeaweedFS is started for the run unless --store gives an S3 URL prefix.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.broker import raw_append_fsync, raw_ranged_gets
from bench.common import emit, percentile, process_cpu_s, progress, save_results, store_or_seaweedfs, table
from bench.serve_process import ServeProcess
from storage_tier import open_store

KiB, MiB = 1024, 1024 * 1024
RECORD = 1 * KiB
_OBJECT_KEY = re.compile(r"^[0-9a-f]{8}/_kafka_[^/]+/\d+$")  # broker data objects (broker/objects/format.py)


class Server:
    """One `mqindex serve` node with its Kafka listener, which can be stopped and started again on its data."""

    def __init__(self, work: Path, name: str, store: str) -> None:
        self.work, self.name, self.store = work, name, store
        self.data_dir = work / name
        self.process: ServeProcess | None = None

    @property
    def url(self) -> str:
        assert self.process is not None
        return self.process.url

    @property
    def bootstrap(self) -> str:
        assert self.process is not None
        return self.process.bootstrap

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return None if self.process is None else self.process.proc

    def start(self) -> Server:
        self.process = ServeProcess(self.data_dir, ["--store", self.store, "--upload-interval-s", "2",
                                                    "--compaction-interval-s", "3600"],
                                    self.work / f"{self.name}.log", kafka=True, what=f"server {self.name}")
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(120)

    def cpu_s(self) -> float:
        assert self.proc is not None
        return process_cpu_s(self.proc.pid)

    def group_commits(self) -> int:
        text = httpx.get(self.url + "/metrics", timeout=10).text
        m = re.search(r"^mqindex_wal_group_commits(?:_total)? ([0-9.e+]+)$", text, re.M)
        if m is None:
            raise RuntimeError("the server's /metrics has no mqindex_wal_group_commits")
        return int(float(m.group(1)))

    def create_topic(self, topic: str, partitions: int, configs: dict[str, int] | None = None) -> None:
        body = {"name": topic, "partitions": partitions, "configs": configs or {}}
        r = httpx.post(self.url + "/v1/topics", json=body, timeout=60)
        r.raise_for_status()


class Profile:
    """py-spy sampling a server process for one phase (--profile DIR): raw collapsed stacks, then the top
    frames by samples (own and inclusive), idle threads left out."""

    def __init__(self, directory: Path | None, server: Server, phase: str, gil: bool = False,
                 rate: int = 50) -> None:
        self.path = directory / f"{phase}.txt" if directory else None
        self.gil = gil
        self.proc: subprocess.Popen[bytes] | None = None
        if self.path is not None and server.proc is not None:
            spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
            # --gil: only the samples of the thread holding the GIL, i.e. where the server's Python CPU goes
            self.proc = subprocess.Popen([spy, "record", "--pid", str(server.proc.pid), "--rate", str(rate), "--format",
                                          "raw", "--output", str(self.path), "--nonblocking"]
                                         + (["--gil"] if gil else []),
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> str:
        if self.proc is None or self.path is None:
            return ""
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return summarize(self.path, what="GIL holder" if self.gil else "active threads") if self.path.exists() else ""


def summarize(path: Path, top: int = 12, what: str = "active threads") -> str:
    """The top frames of a py-spy raw profile: by own samples and by inclusive samples."""
    own: dict[str, int] = {}
    incl: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = [f for f in stack.split(";") if f]
        if not frames or not n.isdigit():
            continue
        total += int(n)
        own[frames[-1]] = own.get(frames[-1], 0) + int(n)
        for f in set(frames):
            incl[f] = incl.get(f, 0) + int(n)
    lines = [f"{path.stem}: {total} samples (50/s, {what})", "  own:"]
    lines += [f"    {100 * n / total:5.1f}%  {f}" for f, n in sorted(own.items(), key=lambda x: -x[1])[:top]]
    lines += ["  inclusive:"]
    lines += [f"    {100 * n / total:5.1f}%  {f}" for f, n in sorted(incl.items(), key=lambda x: -x[1])[:top]
              if "threading.py" not in f and "<frozen" not in f]
    return "\n".join(lines)


def produce_one(p: Any, i: int, topic: str, value: bytes, key: bytes, on_delivery: Any,
                partition: int | None = None) -> None:
    """Hand the i-th message to a confluent-kafka producer, serving delivery reports while its queue is full
    (and every 1,000 messages)."""
    kwargs = {} if partition is None else {"partition": partition}
    while True:
        try:
            p.produce(topic, value, key=key, on_delivery=on_delivery, **kwargs)
            break
        except BufferError:
            p.poll(0.005)
    if i % 1000 == 0:
        p.poll(0)


def _no_cpu() -> float:
    return 0.0


def cpu_figures(nbytes: int, server: float, client: float, s3: float) -> dict[str, float]:
    """CPU per MiB of the server, this client and the S3 server started for the run (0 with --store), and
    the produce rate those three allow on this machine's cores: its ceiling, whatever the disk does."""
    mib = nbytes / MiB
    per = {"server_cpu_ms_mib": 1000 * server / mib, "client_cpu_ms_mib": 1000 * client / mib,
           "s3_cpu_ms_mib": 1000 * s3 / mib}
    per["cpu_ceiling_mb_s"] = (os.cpu_count() or 1) * 1000 / max(sum(per.values()), 1e-9)
    return per


def kafka_produce(server: Server, topic: str, total: int, batch_kb: int,
                  s3_cpu: Callable[[], float] = _no_cpu) -> dict[str, Any]:
    from confluent_kafka import Producer

    value = os.urandom(RECORD)
    n = max(1, total // RECORD)
    p = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "linger.ms": 5,
                  "batch.size": batch_kb * KiB, "message.max.bytes": 2 * batch_kb * KiB + 64 * KiB,
                  "queue.buffering.max.kbytes": 256 * 1024, "queue.buffering.max.messages": 1_000_000,
                  "compression.type": "none", "enable.idempotence": False})
    latencies: list[float] = []
    failed: list[str] = []

    def done(err: Any, msg: Any) -> None:
        """Every message's delivery report: its error, or its latency from produce() to the acknowledgement as
        librdkafka timed it (one shared callback: a closure and a clock reading a message cost the client as
        much CPU as a sixth of the server's, on the same two cores)."""
        if err is not None:
            failed.append(str(err))
        else:
            latencies.append(msg.latency())

    warm = min(n, 100)
    for i in range(warm):  # warm: metadata fetched, connections open
        p.produce(topic, value, key=str(i).encode())
    p.flush(60)
    latencies.clear()
    fsyncs0 = server.group_commits()
    cpu0, client0, s30 = server.cpu_s(), time.process_time(), s3_cpu()
    t0 = time.perf_counter()
    step = max(1, n // 10)
    for i in range(n):
        produce_one(p, i, topic, value, str(i).encode(), done)
        if (i + 1) % step == 0:
            progress("kafka produce", i + 1, n, t0)
    left = p.flush(300)
    secs = time.perf_counter() - t0
    cpu, client, s3 = server.cpu_s() - cpu0, time.process_time() - client0, s3_cpu() - s30
    fsyncs = server.group_commits() - fsyncs0
    if left or failed:
        raise RuntimeError(f"kafka produce: {left} not delivered, {len(failed)} failed ({failed[:3]})")
    nbytes = n * RECORD
    return {"mb_s": nbytes / MiB / secs, "mb": nbytes / MiB, "seconds": secs, "fsyncs": fsyncs,
            "fsyncs_s": fsyncs / secs, "bytes_per_fsync": nbytes / max(fsyncs, 1), "records": n + warm,
            **cpu_figures(nbytes, cpu, client, s3), "p50_ms": percentile(latencies, 50) * 1000,
            "p99_ms": percentile(latencies, 99) * 1000}


def http_produce(server: Server, topic: str, partitions: int, total: int, per_request: int,
                 threads: int, s3_cpu: Callable[[], float] = _no_cpu) -> dict[str, Any]:
    value = "".join(string.ascii_letters[b % 52] for b in os.urandom(RECORD))
    requests = max(1, total // (RECORD * per_request))
    bodies = [json.dumps({"messages": [{"value": value, "partition": p} for _ in range(per_request)]}).encode()
              for p in range(partitions)]
    counter = iter(range(requests))
    lock = threading.Lock()
    errors: list[str] = []
    latencies: list[float] = []
    step = max(1, requests // 10)
    fsyncs0 = server.group_commits()
    cpu0, client0, s30 = server.cpu_s(), time.process_time(), s3_cpu()
    t0 = time.perf_counter()

    def run() -> None:
        with httpx.Client(timeout=120) as http:
            while True:
                with lock:
                    i = next(counter, None)
                if i is None or errors:
                    return
                started = time.perf_counter()
                r = http.post(f"{server.url}/v1/topics/{topic}/messages", content=bodies[i % partitions],
                              headers={"content-type": "application/json"})
                if r.status_code != 200:
                    errors.append(f"{r.status_code} {r.text[:200]}")
                    return
                latencies.append(time.perf_counter() - started)
                if (i + 1) % step == 0:
                    progress("http produce", i + 1, requests, t0)

    ts = [threading.Thread(target=run) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    secs = time.perf_counter() - t0
    cpu, client, s3 = server.cpu_s() - cpu0, time.process_time() - client0, s3_cpu() - s30
    if errors:
        raise RuntimeError(f"http produce failed: {errors[0]}")
    fsyncs = server.group_commits() - fsyncs0
    nbytes = requests * per_request * RECORD
    return {"mb_s": nbytes / MiB / secs, "mb": nbytes / MiB, "seconds": secs, "fsyncs": fsyncs,
            "fsyncs_s": fsyncs / secs, "bytes_per_fsync": nbytes / max(fsyncs, 1),
            "p99_ms": percentile(latencies, 99) * 1000, "request_bytes": per_request * RECORD,
            **cpu_figures(nbytes, cpu, client, s3)}


def cold_consume(server: Server, topic: str, partitions: int, expected: int) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition

    # tuned for throughput: 4 MiB a partition, 16 MiB a fetch. Larger answers (16/64 MiB) are slower:
    # librdkafka's queue (queued.max.messages.kbytes, 64 MiB) fills with one answer, and the next fetch only
    # starts once the application drained it, so reading and consuming alternate instead of overlapping
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "fetch.max.bytes": 16 * MiB, "max.partition.fetch.bytes": 4 * MiB,
                  "fetch.wait.max.ms": 100})
    got = nbytes = 0
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        t0 = time.perf_counter()
        deadline = t0 + 600
        step = max(1, expected // 10)
        mark = step
        while got < expected:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"cold consume: {got}/{expected} records after 600 s")
            # consume() returns once it has 10000 messages or the timeout passed: a long timeout would be
            # added to the time of the last (partial) batch
            for m in c.consume(10000, 0.01):
                if m.error() is not None:
                    raise RuntimeError(f"cold consume: {m.error()}")
                got += 1
                nbytes += len(m.value() or b"")
            if got >= mark:
                progress("cold consume", got, expected, t0)
                mark += step
        secs = time.perf_counter() - t0
    finally:
        c.close()
    return {"mb_s": nbytes / MiB / secs, "mb": nbytes / MiB, "seconds": secs, "records": got}


def raw_gets(store_url: str) -> dict[str, Any]:
    store = open_store(store_url)
    try:
        keys = [k for k in store.list("") if _OBJECT_KEY.match(k)]
    finally:
        store.close()
    secs, raw = raw_ranged_gets(store_url, keys)
    return {"mb_s": raw / MiB / secs, "mb": raw / MiB, "objects": len(keys)}


def _sub(url: str, name: str) -> str:
    """The store URL one level below `url` (its path gets /name, the query stays)."""
    path, sep, query = url.partition("?")
    return f"{path.rstrip('/')}/{name}{sep}{query}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mqindex bench kafka", description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=128, help="MiB produced by each producer")
    ap.add_argument("--batch-kb", type=int, default=1024, help="librdkafka batch.size in KiB (16-1024)")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--http-records", type=int, default=256, help="1 KiB records per HTTP produce request")
    ap.add_argument("--http-threads", type=int, default=4)
    ap.add_argument("--store", help="S3 URL prefix of an existing store (default: start SeaweedFS for the run)")
    ap.add_argument("--dir", help="work directory (default: a temporary one, removed after)")
    ap.add_argument("--profile", help="directory for py-spy profiles of the server in each phase (needs py-spy)")
    ap.add_argument("--profile-rate", type=int, default=50, help="py-spy samples per second (--profile)")
    ap.add_argument("--profile-gil", action="store_true",
                    help="profile only the thread holding the GIL (where the server's Python CPU goes)")
    ap.add_argument("--transactions", action="store_true",
                    help="only the transactions benchmark (bench/kafka_txn.py): transactional vs idempotent produce")
    ap.add_argument("--txn-records", type=int, default=100_000, help="1 KiB records in each row (--transactions)")
    ap.add_argument("--txn-size", type=int, default=100, help="records per transaction (--transactions)")
    ap.add_argument("--latency-txns", type=int, default=200, help="transactions timed one by one (--transactions)")
    ap.add_argument("--txn-sizes", type=_sizes, default=[100, 300, 1000, 3000, 10000],
                    help="records per transaction to run the transactional producer at, comma-separated, or 'none' "
                         "(--transactions)")
    ap.add_argument("--txn-producers", type=_producers, default=4,
                    help="transactional and idempotent producers run at once, 0 for none (--transactions)")
    args = ap.parse_args(argv)
    if args.transactions:
        return _transactions(args)
    profile_dir = Path(args.profile) if args.profile else None
    if profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-kafka-"))
    work.mkdir(parents=True, exist_ok=True)
    run = uuid.uuid4().hex[:8]
    base_url, weed = store_or_seaweedfs(args.store, work, f"kafka-{run}")
    servers: list[Server] = []
    total = args.mb * MiB
    try:
        kstore, hstore = (_sub(base_url, "k"), _sub(base_url, "h"))
        # the raw peers at the client's batch size and at the HTTP request size are measured before the runs
        # and after them, and averaged (as bench.broker does): the disk is shared, and one reading swung by
        # a third between runs
        raw_total = min(total, 128 * MiB)
        print("[bench] raw append+fsync peers (before)", file=sys.stderr, flush=True)
        raw_batch0 = raw_append_fsync(work, raw_total, args.batch_kb * KiB)
        raw_req0 = raw_append_fsync(work, raw_total, args.http_records * RECORD)
        ks = Server(work, "kafka-node", kstore).start()
        servers.append(ks)
        # the topic takes what the client may send (its message.max.bytes): a --batch-kb past 1 MiB is not refused
        ks.create_topic("bench-k", args.partitions, {"max.message.bytes": 2 * args.batch_kb * KiB + 64 * KiB})
        print("[bench] kafka produce", file=sys.stderr, flush=True)
        prof = Profile(profile_dir, ks, "kafka-produce", args.profile_gil, args.profile_rate)
        s3_cpu = _no_cpu if weed is None else (lambda: process_cpu_s(weed.proc.pid))
        kr = kafka_produce(ks, "bench-k", total, args.batch_kb, s3_cpu)
        profiles = [prof.stop()]
        hs = Server(work, "http-node", hstore).start()
        servers.append(hs)
        hs.create_topic("bench-h", args.partitions)
        print("[bench] http produce", file=sys.stderr, flush=True)
        prof = Profile(profile_dir, hs, "http-produce", args.profile_gil, args.profile_rate)
        hr = http_produce(hs, "bench-h", args.partitions, total, args.http_records, args.http_threads,
                          s3_cpu)
        profiles.append(prof.stop())
        hs.stop()
        print("[bench] raw append+fsync peers (after)", file=sys.stderr, flush=True)
        size_k = max(4 * KiB, int(kr["bytes_per_fsync"]) // 4096 * 4096)
        size_h = max(4 * KiB, int(hr["bytes_per_fsync"]) // 4096 * 4096)
        raw_k = raw_append_fsync(work, raw_total, size_k)
        raw_h = raw_append_fsync(work, raw_total, size_h)
        raw_batch1 = raw_append_fsync(work, raw_total, args.batch_kb * KiB)
        raw_req1 = raw_append_fsync(work, raw_total, hr["request_bytes"])
        raw_batch, raw_req = (raw_batch0 + raw_batch1) / 2, (raw_req0 + raw_req1) / 2
        print("[bench] cold consume: restarting the server with empty caches", file=sys.stderr, flush=True)
        ks.stop()  # uploads what is cached
        ks.start()
        prof = Profile(profile_dir, ks, "cold-consume", args.profile_gil, args.profile_rate)
        cr = cold_consume(ks, "bench-k", args.partitions, kr["records"])
        profiles.append(prof.stop())
        ks.stop()
        gr = raw_gets(kstore)
        results = {"kafka": kr, "http": hr, "raw_kafka_write_mb_s": raw_k, "raw_http_write_mb_s": raw_h,
                   "raw_batch_mb_s": raw_batch, "raw_request_mb_s": raw_req,
                   "raw_batch_before_after_mb_s": [raw_batch0, raw_batch1],
                   "raw_request_before_after_mb_s": [raw_req0, raw_req1], "consume": cr, "raw_get": gr}
        emit(table(f"Produce, 1 KiB records, ack after fsync ({args.mb} MiB each, {args.partitions} partitions)",
                   ["", "MB/s", "p99 ms", "fsyncs/s", "bytes/fsync", "server CPU ms/MiB", "client CPU ms/MiB",
                    "raw append+fsync MB/s (same write)", "ratio"],
                   [["Kafka (confluent-kafka, acks=all, linger 5 ms, "
                     f"batch {args.batch_kb} KiB)", kr["mb_s"], kr["p99_ms"], kr["fsyncs_s"],
                     f"{kr['bytes_per_fsync'] / KiB:.0f} KiB", kr["server_cpu_ms_mib"], kr["client_cpu_ms_mib"],
                     raw_k, kr["mb_s"] / raw_k],
                    [f"Kafka vs raw at the client batch size (raw before/after: {raw_batch0:.0f}/{raw_batch1:.0f})",
                     kr["mb_s"], "", "", f"{args.batch_kb} KiB", "", "", raw_batch, kr["mb_s"] / raw_batch],
                    [f"HTTP ({args.http_records} records/request, {args.http_threads} threads, JSON)", hr["mb_s"],
                     hr["p99_ms"], hr["fsyncs_s"], f"{hr['bytes_per_fsync'] / KiB:.0f} KiB", hr["server_cpu_ms_mib"],
                     hr["client_cpu_ms_mib"], raw_h, hr["mb_s"] / raw_h],
                    [f"HTTP vs raw at the request size (raw before/after: {raw_req0:.0f}/{raw_req1:.0f})", hr["mb_s"],
                     "", "", f"{hr['request_bytes'] / KiB:.0f} KiB", "", "", raw_req, hr["mb_s"] / raw_req]]))
        cores = os.cpu_count() or 1
        s3_note = "the S3 server started for the run" if weed is not None else "S3 elsewhere (--store): not counted"
        emit(table(f"CPU per MiB produced and the rate it allows on this machine's {cores} cores "
                   f"(S3 server: {s3_note}); the ratio at the write size cannot exceed ceiling / raw",
                   ["", "server", "client", "S3 server", "all", f"ceiling MB/s ({cores} cores)", "raw MB/s",
                    "ceiling / raw"],
                   [[name, r["server_cpu_ms_mib"], r["client_cpu_ms_mib"], r["s3_cpu_ms_mib"],
                     1000 * cores / r["cpu_ceiling_mb_s"], r["cpu_ceiling_mb_s"], raw, r["cpu_ceiling_mb_s"] / raw]
                    for name, r, raw in ((f"Kafka, batch {args.batch_kb} KiB", kr, raw_batch),
                                         (f"HTTP, {hr['request_bytes'] // KiB} KiB requests", hr, raw_req))]))
        emit(table(f"Cold consume ({cr['mb']:.0f} MiB of values, {gr['objects']} objects, fresh server)",
                   ["", "MB/s", "ratio vs raw GET"],
                   [["Kafka consumer (confluent-kafka)", cr["mb_s"], cr["mb_s"] / gr["mb_s"]],
                    [f"raw 1 MiB ranged GETs ({gr['mb']:.0f} MiB)", gr["mb_s"], 1.0]]))
        for text in profiles:
            if text:
                emit(text)
        path = save_results("kafka", results)
        emit(f"raw figures: {path}")
    finally:
        for s in servers:
            s.stop()
        if weed is not None:
            weed.stop()
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def _sizes(text: str) -> list[int]:
    """--txn-sizes: positive record counts, comma-separated, or 'none'."""
    if text.strip().lower() == "none":
        return []
    try:
        sizes = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not comma-separated numbers: {text!r}") from None
    if any(v < 1 for v in sizes):
        raise argparse.ArgumentTypeError(f"a transaction holds at least 1 record: {text!r}")
    return sizes


def _producers(text: str) -> int:
    """--txn-producers: 0 (none) or more."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"0 (none) or more producers: {text!r}")
    return n


def _transactions(args: argparse.Namespace) -> int:
    from bench import kafka_txn

    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-kafka-txn-"))
    work.mkdir(parents=True, exist_ok=True)
    base_url, weed = store_or_seaweedfs(args.store, work, f"kafka-txn-{uuid.uuid4().hex[:8]}")
    try:
        kafka_txn.run(work, base_url, Server, args.partitions, args.txn_records, args.txn_size, args.latency_txns,
                      args.txn_sizes, args.txn_producers)
    finally:
        if weed is not None:
            weed.stop()
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
