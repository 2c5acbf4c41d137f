"""Kafka listener benchmark: the cost of one produce request on the listener, in process, beside raw append+fsync.

A broker node on a local-disk store and its Kafka listener run in this process (with the garbage collector set
as `mqindex serve` sets it once its node is open); a client in another process sends `--requests`
produce requests of one `--batch-kb` RecordBatch each (1 KiB keyed records, acks=all, partitions in turn) all
at once on one connection and reads the answers. Printed: requests and MB per second, the listener thread's
CPU per request (read from /proc, so the other threads' share and the client's are apart), the whole server
process's CPU per request, group commits, and raw append+fsync MB/s in the same run at the request size and at
the WAL's mean group-commit size, with the ratios. The client's answers are decoded and checked after the
clock stops: every request answered once, in order, without an error, at the offsets expected.

Run: `mqindex bench listener` or `python -m bench.listener [--requests 8000] [--batch-kb 16] [--rounds 3]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.broker import MiB, raw_append_fsync
from bench.common import emit, save_results, served_collector, table, thread_cpu_s

RECORD = 1024


def _frames(count: int, batch_kb: int, partitions: int) -> tuple[bytes, int]:
    """`count` framed ProduceRequests v7 (topic "bench", partitions in turn) and the records in each batch."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    from api.kafka.framing import frame
    from api.kafka.schemas import APIS, build

    per_batch = max(1, batch_kb * 1024 // (RECORD + 24))
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 24)
    for i in range(per_batch):
        b.append(i, timestamp=None, key=b"key-%d" % i, value=os.urandom(RECORD), headers=[])
    records = bytes(b.build())
    out = bytearray()
    for i in range(count):
        req = build(APIS[0].request, 7, transactional_id=None, acks=-1, timeout_ms=30_000,
                    topic_data=[dict(name="bench", partition_data=[dict(index=i % partitions, records=records)])])
        req.with_header(correlation_id=i, client_id="bench-listener")
        out += frame(req.encode(header=True))
    return bytes(out), per_batch


def client(port: int, count: int, batch_kb: int, partitions: int) -> int:
    """The client process: send every request at once, read every answer, then check them (off the clock)."""
    import socket

    from api.kafka.schemas import APIS

    frames, per_batch = _frames(count, batch_kb, partitions)
    sock = socket.create_connection(("127.0.0.1", port), timeout=120)
    print("ready", flush=True)
    sys.stdin.readline()
    t0 = time.perf_counter()
    threading.Thread(target=sock.sendall, args=(frames,), daemon=True).start()
    answers: list[bytes] = []
    buf = bytearray()
    while len(answers) < count:
        data = sock.recv(1 << 20)
        if not data:
            raise RuntimeError(f"connection closed after {len(answers)} of {count} answers")
        buf += data
        pos = 0
        while len(buf) - pos >= 4:
            (size,) = struct.unpack_from(">i", buf, pos)
            if len(buf) - pos < 4 + size:
                break
            answers.append(bytes(buf[pos + 4:pos + 4 + size]))
            pos += 4 + size
        del buf[:pos]
    secs = time.perf_counter() - t0
    sock.close()
    for i, a in enumerate(answers):
        (correlation_id,) = struct.unpack_from(">i", a)
        p = APIS[0].response.decode(a[4:], version=7).responses[0].partition_responses[0]
        expected = (i // partitions) * per_batch
        if correlation_id != i or p.error_code != 0 or p.base_offset != expected:
            raise RuntimeError(f"answer {i}: correlation id {correlation_id}, error {p.error_code}, "
                               f"offset {p.base_offset} (expected {expected})")
    print(f"{secs} {len(frames)}", flush=True)
    return 0


def one_round(work: Path, count: int, batch_kb: int, partitions: int) -> dict[str, Any]:
    from api.kafka.server import KafkaServer
    from broker.node import BrokerNode

    node = BrokerNode.open(work / "node", f"file://{work}/store", f"sqlite:///{work}/meta.sqlite",
                           upload_interval_s=3600.0, maintenance_interval_s=0)
    try:
        # max.message.bytes above the batches sent: a --batch-kb past Kafka's default 1 MiB is measured, not refused
        node.create_topic("bench", partitions, {"max.message.bytes": 2 * batch_kb * 1024 + (64 << 10)})
        with served_collector():  # as `mqindex serve` sets it once its node is open
            server = KafkaServer(node, "127.0.0.1", 0)
            server.start()
            try:
                listener = next(t for t in threading.enumerate() if t.name == "kafka-listener")
                assert listener.native_id is not None
                client = [sys.executable, "-m", "bench.listener", "--client", str(server.port), str(count),
                          str(batch_kb), str(partitions)]
                with subprocess.Popen(client, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
                    try:
                        assert proc.stdin is not None and proc.stdout is not None
                        if proc.stdout.readline().strip() != "ready":
                            raise RuntimeError("the benchmark's client did not start")
                        loop0, cpu0 = thread_cpu_s(listener.native_id), time.process_time()
                        fsyncs0 = node.wal.fsyncs
                        print(f"[bench] listener: {count} produce requests of {batch_kb} KiB", file=sys.stderr,
                              flush=True)
                        proc.stdin.write("go\n")
                        proc.stdin.flush()
                        line = proc.stdout.readline()
                        loop, cpu = thread_cpu_s(listener.native_id) - loop0, time.process_time() - cpu0
                        fsyncs = node.wal.fsyncs - fsyncs0
                        if proc.wait(120) != 0 or not line:
                            raise RuntimeError("the benchmark's client failed (its error is above)")
                    finally:
                        if proc.poll() is None:
                            proc.kill()
                            proc.wait()
            finally:
                server.stop()
        secs, nbytes = float(line.split()[0]), int(line.split()[1])
    finally:
        node.close()
    return {"requests": count, "seconds": secs, "requests_s": count / secs, "mb_s": nbytes / MiB / secs,
            "listener_us": 1e6 * loop / count, "process_us": 1e6 * cpu / count, "fsyncs": fsyncs,
            "bytes_per_fsync": nbytes / max(fsyncs, 1), "request_bytes": nbytes / count}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mqindex bench listener", description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=8000, help="produce requests in a round")
    ap.add_argument("--batch-kb", type=int, default=16, help="KiB of records in each request's one batch")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", help="work directory (default: a temporary one, removed after)")
    ap.add_argument("--client", nargs=4, type=int, metavar=("PORT", "COUNT", "BATCH_KB", "PARTITIONS"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.client:
        return client(*args.client)
    if args.requests < 1 or args.batch_kb < 1 or args.partitions < 1 or args.rounds < 1:
        raise SystemExit("--requests, --batch-kb, --partitions and --rounds must be at least 1")
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="mqindex-bench-listener-"))
    rows, results = [], []
    try:
        for r in range(args.rounds):
            work = base / f"round-{r}"
            res = one_round(work, args.requests, args.batch_kb, args.partitions)
            # the raw peer at the request size and at the WAL's mean group commit, right after the round
            total = min(int(res["request_bytes"] * args.requests), 128 * MiB)
            res["raw_request_mb_s"] = raw_append_fsync(work, total, int(res["request_bytes"]))
            res["raw_group_mb_s"] = raw_append_fsync(work, total, max(4096, int(res["bytes_per_fsync"])))
            shutil.rmtree(work, ignore_errors=True)
            results.append(res)
            rows.append([r + 1, res["requests_s"], res["mb_s"], res["listener_us"], res["process_us"],
                         res["fsyncs"], f"{res['bytes_per_fsync'] / 1024:.0f} KiB", res["raw_request_mb_s"],
                         res["mb_s"] / res["raw_request_mb_s"], res["raw_group_mb_s"],
                         res["mb_s"] / res["raw_group_mb_s"]])
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    emit(table(f"Kafka listener, in process: {args.requests} produce requests of one {args.batch_kb} KiB batch, "
               f"{args.partitions} partitions, acks=all",
               ["round", "requests/s", "MB/s", "listener CPU us/request", "process CPU us/request",
                "group commits", "bytes/commit", "raw append+fsync at the request size MB/s", "ratio",
                "raw at the group-commit size MB/s", "ratio"], rows))
    path = save_results("listener", {"args": vars(args), "rounds": results})
    print(f"raw figures: {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
