"""Failover benchmark: what the WAL on the object store costs a producer, and how long a partition whose
leader was killed (kill -9, never restarted) stays unwritable.

Real `mqindex serve` processes on one PostgreSQL metadata database (a fresh schema per part) and SeaweedFS
(started for the run unless --store and --wal-store are given).

1. Produce: one node, the same closed-loop producer (THREADS threads, each posting BATCH messages of
   VALUE_KB KiB and waiting for the answer) run once with the local WAL (`file://`, the default) and once
   with the WAL on SeaweedFS (`--wal s3://...`); per request latency p50/p99 and MB/s of values
   acknowledged. Peer: the local WAL, same run; printed: the S3 WAL / local WAL ratios.
2. Failover: three nodes with the S3 WAL and the default lease (10 s), a topic of PARTITIONS partitions spread
   over them. Each round: produce to every partition the node to be killed leads, so its WAL holds
   acknowledged records not yet uploaded, kill -9 it, and from a surviving node produce to each of those
   partitions at once (one producer per partition, following 421 to the leader, retrying 503 and refused
   connections) until its first 200; measured per partition: kill -9 -> that first acknowledged produce,
   against the lease. A new node joins after each kill, so every round starts with three live nodes.
   Goal: p99 <= lease + 1 s. The lease's share is intrinsic (the survivors wait a whole lease after they last
   saw the dead node's lease renewed, renewals come every lease/5); the table splits it out. Printed beside it:
   the servers' CPU over the part (every `mqindex serve`, from /proc) against the machine's cores.
3. Rolling upgrade (bench/failover_upgrade.py): three nodes of the previous release (CHANGELOG.md) upgraded one
   at a time to the working tree under one producer per partition: error answers, the longest gap between
   acknowledgements (goal < 2 s), server CPU per 1,000 acknowledged messages and the ceiling of the cores.

Run: `mqindex bench failover [--requests 400] [--threads 4] [--batch 16] [--value-kb 4] [--kills 5]
[--partitions 6] [--no-produce] [--no-kill] [--no-upgrade]`
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench.common import TreeCPU, emit, percentile, progress, save_results, store_or_seaweedfs, table
from bench.failover_release import previous_mqindex
from bench.failover_upgrade import GAP_GOAL_S, rolling_upgrade
from bench.serve_process import ServeProcess

PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_LEASE_S = 10.0  # `mqindex serve --lease-ms` default


def node_process(work: Path, node_id: int, *flags: str) -> ServeProcess:
    """Node `node_id` of the run, its data and log under `work`."""
    return ServeProcess(work / f"node{node_id}", ["--node-id", str(node_id), *flags], work / f"node{node_id}.log",
                        what=f"node {node_id}")


def _produce_run(node: ServeProcess, requests: int, threads: int, batch: int, value_kb: int,
                 what: str) -> dict[str, Any]:
    value = "x" * (value_kb << 10)
    body = {"messages": [{"key": f"k{i}", "value": value} for i in range(batch)]}
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    left = [requests]

    def worker() -> None:
        with httpx.Client(timeout=60) as http:
            while True:
                with lock:
                    if left[0] <= 0 or errors:
                        return
                    left[0] -= 1
                t0 = time.perf_counter()
                r = http.post(f"{node.url}/v1/topics/bench/messages", json=body)
                took = time.perf_counter() - t0
                with lock:
                    if r.status_code != 200:
                        errors.append(f"{r.status_code} {r.text[:200]}")
                        return
                    latencies.append(took)
                    if len(latencies) % max(1, requests // 4) == 0:
                        progress(f"produce, {what}", len(latencies), requests, started)

    with httpx.Client(timeout=60) as http:  # warm-up: connections, first WAL objects
        for _ in range(5):
            http.post(f"{node.url}/v1/topics/bench/messages", json=body).raise_for_status()
    started = time.perf_counter()
    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"produce failed ({what}): {errors[0]}")
    mb = len(latencies) * batch * (value_kb << 10) / (1 << 20)
    return {"p50_ms": 1000 * percentile(latencies, 50), "p99_ms": 1000 * percentile(latencies, 99),
            "mb_s": mb / elapsed, "requests": len(latencies), "seconds": elapsed}


def _leader(via: str, partition: str) -> int:
    nodes = httpx.get(f"{via}/v1/cluster/nodes", timeout=10).json()["nodes"]
    return next(n["node_id"] for n in nodes if n["state"] == "alive" and partition in n["partitions"])


def _led_by(via: str, node_id: int, topic: str) -> list[int]:
    """The partitions of `topic` that `node_id` leads."""
    nodes = httpx.get(f"{via}/v1/cluster/nodes", timeout=10).json()["nodes"]
    led = next((n["partitions"] for n in nodes if n["node_id"] == node_id), [])
    return sorted(int(p.rsplit("-", 1)[1]) for p in led if p.rsplit("-", 1)[0] == topic)


def _first_acks_after_kill(victim: ServeProcess, via: ServeProcess, partitions: list[int],
                           timeout_s: float) -> list[tuple[float, int]]:
    """kill -9 the victim, then produce to each partition through `via` (one thread each) until its first 200;
    (seconds, error answers) per partition."""
    out: list[tuple[float, int] | BaseException] = [RuntimeError("not run")] * len(partitions)
    killed = time.perf_counter()
    victim.kill()

    def one(i: int, p: int) -> None:
        try:
            out[i] = _first_ack(via, p, killed, timeout_s)
        except BaseException as exc:  # noqa: BLE001 - raised below
            out[i] = exc

    ts = [threading.Thread(target=one, args=(i, p)) for i, p in enumerate(partitions)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for r in out:
        if isinstance(r, BaseException):
            raise r
    return out  # type: ignore[return-value]


def _first_ack(via: ServeProcess, partition: int, killed: float, timeout_s: float) -> tuple[float, int]:
    msg = {"messages": [{"key": "after-kill", "value": "v", "partition": partition}]}
    errors = 0
    base = via.url
    with httpx.Client(timeout=30) as http:
        while time.perf_counter() - killed < timeout_s:
            try:
                r = http.post(f"{base}/v1/topics/failover/messages", json=msg)
            except httpx.TransportError:  # sent to the dead leader: ask the survivor again
                errors += 1
                base = via.url
                time.sleep(0.01)
                continue
            if r.status_code == 200:
                return time.perf_counter() - killed, errors
            errors += 1
            if r.status_code == 421:
                base = r.json().get("leader_url") or via.url
            elif r.status_code == 503:
                base = via.url
            else:
                raise RuntimeError(f"produce after the kill: {r.status_code} {r.text[:200]}")
            time.sleep(0.01)
    raise RuntimeError(f"no acknowledged produce within {timeout_s}s of the kill")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mqindex bench failover", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=400, help="produce requests per WAL kind (default 400)")
    ap.add_argument("--threads", type=int, default=4, help="producer threads (default 4)")
    ap.add_argument("--batch", type=int, default=16, help="messages per request (default 16)")
    ap.add_argument("--value-kb", type=int, default=4, help="value size in KiB (default 4)")
    ap.add_argument("--kills", type=int, default=5, help="kill -9 rounds (default 5)")
    ap.add_argument("--partitions", type=int, default=6, help="partitions of the failover topic (default 6)")
    ap.add_argument("--no-produce", action="store_true", help="skip part 1 (the WAL kinds' produce run)")
    ap.add_argument("--no-kill", action="store_true", help="skip part 2 (kill -9 of a leader)")
    ap.add_argument("--no-upgrade", action="store_true", help="skip part 3 (the rolling upgrade)")
    ap.add_argument("--store", help="S3 store URL for the data (default: SeaweedFS started for the run)")
    ap.add_argument("--wal-store", help="S3 store URL for the WAL (with --store)")
    ap.add_argument("--metadata", default=os.environ.get("MQINDEX_TEST_PG", PG_DEFAULT),
                    help="PostgreSQL URL (fresh schemas are used)")
    args = ap.parse_args(argv)
    if (args.store is None) != (args.wal_store is None):
        ap.error("--store and --wal-store go together")
    work = Path(tempfile.mkdtemp(prefix="mqindex-bench-failover-"))
    run = uuid.uuid4().hex[:8]
    store, weed = store_or_seaweedfs(args.store, work, f"failover-{run}")
    wal_store = args.wal_store or weed.store_url("mqindex", f"failover-{run}-wal")
    sep = "&" if "?" in args.metadata else "?"
    results: dict[str, Any] = {}
    try:
        # 1. produce with the local WAL and with the S3 WAL
        for kind in () if args.no_produce else ("local", "s3"):
            d = work / f"produce-{kind}"
            d.mkdir()
            flags = ["--store", store, "--metadata", f"{args.metadata}{sep}schema=bench_fo_{kind}_{run}"]
            if kind == "s3":
                flags += ["--wal", wal_store]
            node = node_process(d, 100, *flags)  # an id the failover part never uses (its WAL objects differ)
            try:
                httpx.post(f"{node.url}/v1/topics", json={"name": "bench", "partitions": 4},
                           timeout=60).raise_for_status()
                results[kind] = _produce_run(node, args.requests, args.threads, args.batch, args.value_kb,
                                             f"{kind} WAL")
            finally:
                node.stop()
        loc, s3 = results.get("local"), results.get("s3")
        if loc is not None and s3 is not None:
            emit(table(f"produce with the WAL on local disk vs on SeaweedFS ({args.threads} threads, "
                       f"{args.batch} x {args.value_kb} KiB per request, {args.requests} requests)",
                       ["WAL", "p50 ms", "p99 ms", "MB/s"],
                       [["local (file://)", loc["p50_ms"], loc["p99_ms"], loc["mb_s"]],
                        ["S3 (SeaweedFS)", s3["p50_ms"], s3["p99_ms"], s3["mb_s"]],
                        ["S3 / local", s3["p50_ms"] / loc["p50_ms"], s3["p99_ms"] / loc["p99_ms"],
                         s3["mb_s"] / loc["mb_s"]]]))

        # 2. kill -9 the leader, time to the first acknowledged produce on the new leader
        if not args.no_kill:
            results["failover"] = _kill_part(args, work, store, wal_store, sep, run)
        # 3. rolling upgrade from the previous release
        if not args.no_upgrade:
            results["upgrade"] = _upgrade_part(args, work, store, wal_store, weed, sep, run)
    finally:
        if weed is not None:
            weed.stop()
        _drop_schemas(args.metadata, [f"bench_fo_{part}_{run}" for part in ("local", "s3", "kill", "upgrade")])
    save_results("failover", results)
    return 0


def _upgrade_part(args: argparse.Namespace, work: Path, store: str, wal_store: str, weed: Any, sep: str,
                  run: str) -> dict[str, Any]:
    version, old = previous_mqindex()
    d = work / "upgrade"
    d.mkdir()
    if weed is not None:  # a store and WAL of its own (node ids and object ids restart in its schema)
        store, wal_store = (weed.store_url("mqindex", f"failover-{run}-up"),
                            weed.store_url("mqindex", f"failover-{run}-up-wal"))
    flags = ["--store", store, "--metadata", f"{args.metadata}{sep}schema=bench_fo_upgrade_{run}", "--wal", wal_store]
    r = rolling_upgrade(old, version, d, flags, args.partitions)
    errs = ", ".join(f"{k}: {v}" for k, v in sorted(r["errors"].items())) or "none"
    emit(table(f"rolling upgrade of 3 nodes, {version} -> working tree, one at a time (SIGTERM, start, alive) "
               f"under {args.partitions} producers (one per partition); error answers: {errs}",
               ["acks", "seconds", "acks/s", "error answers", "longest gap, a partition s", "median partition's s",
                "longest gap, topic s", f"goal < {GAP_GOAL_S:.0f} s"],
               [[r["acks"], r["seconds"], r["acks_per_s"], r["error_answers"], r["partition_gap_max_s"],
                 r["partition_gap_p50_s"], r["topic_gap_s"], r["goal"]]]))
    emit(table("rolling upgrade: each node's stop and return", ["node", "SIGTERM -> exited s",
                                                                "SIGTERM -> alive, upgraded s"],
               [[s["node"], s["stop_s"], s["back_s"]] for s in r["steps"]]))
    emit(table(f"rolling upgrade: servers' CPU ({r['cores']} cores)",
               ["server CPU s", "CPU ms / 1,000 acks", f"ceiling acks/s ({r['cores']} cores)", "measured acks/s",
                "measured / ceiling"],
               [[r["server_cpu_s"], r["server_cpu_ms_per_1000"], r["ceiling_acks_per_s"], r["acks_per_s"],
                 r["acks_per_s"] / r["ceiling_acks_per_s"]]]))
    return r


def _kill_part(args: argparse.Namespace, work: Path, store: str, wal_store: str, sep: str, run: str
               ) -> list[dict[str, Any]]:
    d = work / "failover"
    d.mkdir()
    flags = ["--store", store, "--metadata", f"{args.metadata}{sep}schema=bench_fo_kill_{run}",
             "--wal", wal_store, "--upload-interval-s", "30"]
    nodes: dict[int, ServeProcess] = {}
    samples: list[dict[str, Any]] = []
    cpu = TreeCPU(lambda cmd: "servers" if " serve " in f" {cmd} " else "other")
    started = time.monotonic()
    try:
        for i in range(3):
            nodes[i] = node_process(d, i, *flags)
        httpx.post(f"{nodes[0].url}/v1/topics", json={"name": "failover", "partitions": args.partitions},
                   timeout=60).raise_for_status()
        next_id = 3
        for k in range(args.kills):
            any_url = nodes[min(nodes)].url
            leader = _leader(any_url, "failover-0")
            led = _led_by(any_url, leader, "failover")
            with httpx.Client(timeout=30) as http:  # acknowledged, only in the leader's WAL (not uploaded)
                for p in led:
                    for i in range(20):
                        r = http.post(f"{nodes[leader].url}/v1/topics/failover/messages",
                                      json={"messages": [{"key": f"before-{k}", "value": f"v{i}",
                                                          "partition": p}]})
                        r.raise_for_status()
            via = nodes[min(n for n in nodes if n != leader)]
            acks = _first_acks_after_kill(nodes.pop(leader), via, led, 120)
            for p, (took, errors) in zip(led, acks, strict=True):
                samples.append({"kill_to_first_ack_s": took, "producer_errors": errors, "killed": leader,
                                "partition": p, "round": k})
            print(f"[bench] kill {k + 1}/{args.kills}: node {leader} killed, first ack on its "
                  f"{len(led)} partitions after {min(a[0] for a in acks):.2f}-{max(a[0] for a in acks):.2f}s",
                  file=sys.stderr, flush=True)
            nodes[next_id] = node_process(d, next_id, *flags)
            next_id += 1
        cpu_s = cpu.snapshot().get("servers", 0.0)
    finally:
        for n in nodes.values():
            n.kill()
        cpu.stop()
    wall = time.monotonic() - started
    firsts = [s["kill_to_first_ack_s"] for s in samples]
    p99 = percentile(firsts, 99)
    emit(table(f"kill -9 of a leader -> first acknowledged produce per partition it led (S3 WAL, default "
               f"lease {DEFAULT_LEASE_S:.0f} s, {args.kills} kills, {len(firsts)} partitions)",
               ["partitions", "p50 s", "p99 s", "max s", "p99 - lease s", "goal p99 <= lease + 1 s"],
               [[len(firsts), percentile(firsts, 50), p99, max(firsts), p99 - DEFAULT_LEASE_S,
                 "met" if p99 <= DEFAULT_LEASE_S + 1 else "missed"]]))
    cores = os.cpu_count() or 1
    emit(table(f"kill -9 part: servers' CPU (every node of the part, {cores} cores)",
               ["wall s", "server CPU s", "CPU s per kill round", "cores used (mean)", f"of {cores} cores"],
               [[wall, cpu_s, cpu_s / max(args.kills, 1), cpu_s / wall, cpu_s / wall / cores]]))
    return samples


def _drop_schemas(url: str, names: list[str]) -> None:
    """The run's metadata schemas are its own: dropped at the end, whatever happened."""
    with psycopg.connect(url.split("?", 1)[0], autocommit=True) as conn:
        for name in names:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


if __name__ == "__main__":
    sys.exit(main())
