"""Reassignment benchmark: time from the reassignment request to the first acknowledged produce on the
target node, with a given amount of the partition's data not yet uploaded at the moment of the move.

Two `mqindex serve` processes (node 0 and node 1) on one PostgreSQL metadata schema and one SeaweedFS
bucket (started for the run unless --store is given), uploads held back (upload interval 600 s, threshold
above the data size) so the data really is only in the source's WAL and log cache when the move starts.
Each move: fill the partition with SIZE of 64 KiB values, then a producer produces to the partition as a client
does (to the source, following the 421 to the target, retrying its 503 answers) while the move is asked for;
measured: request -> first 200 from the target. Also printed: the seconds the request itself took (it returns
once the target serves), the producer's error answers and its error window (from its last acknowledgement by
the source to its first by the target).

Peer: the raw upload time of the same bytes (one PUT per 8 MiB part) on the same store in the same run,
because a move uploads what the source holds: the ratio says how much the move costs above that upload.

The WAL is shared (on the store, `--wal shared`, the default): a move lends what is not uploaded to the target,
which reads it from the source's WAL objects in the background; with a local WAL (`--wal local`) the source
uploads it before it closes the streams.

Before each move the previous one is let finish in the background (`--settle`, the default): its target has read
the moved range from the source's WAL and uploaded it. Every measured move so starts from the same state, its
source holding the bytes of that move unuploaded and uploading nothing; without it, the source of a move is the
target of the one before, still reading and uploading the previous move's bytes while it is asked to move.

Auto-balance (`--balance-s`, 0 to skip): three nodes with short balancer settings, six partitions, one of them
produced to at ten times the others' bytes: the time until the balancer has left the hot partition alone on its
node, and the moves it made over the whole run (none after that: it stays quiet).

Run: `mqindex bench reassign [--sizes-mb 10,256,1024] [--wal shared,local] [--moves 20] [--big-moves 5]
[--balance-s 90]`
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx

from bench.common import emit, percentile, process_cpu_s, save_results, store_or_seaweedfs, table
from bench.serve_process import ServeProcess
from storage_tier import open_store

PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"
VALUE = 64 << 10


def node_process(work: Path, node_id: int, store: str, meta: str, hold_bytes: int,
                 wal: str | None = None) -> ServeProcess:
    """Node `node_id`: uploads held back (10 min, and a threshold above what a move carries) so what it holds is
    only in its WAL and cache. wal: the shared WAL's store URL (None: a local WAL)."""
    return ServeProcess(work / f"node{node_id}", [
        "--store", store, "--metadata", meta, "--node-id", str(node_id), "--lease-ms", "3000",
        "--upload-interval-s", "600", "--upload-threshold", str(hold_bytes), "--max-cache-bytes", str(2 * hold_bytes),
        *(["--wal", wal] if wal else [])],
        work / f"node{node_id}.log", what=f"node {node_id}")


def wal_url(store: str) -> str:
    """The shared WAL's store URL beside the object store's (the same bucket, its own prefix)."""
    return store.replace("?", "-wal?", 1) if "?" in store else f"{store}-wal"


def _fill(node: ServeProcess, mb: int) -> None:
    value = "x" * VALUE
    batch = {"messages": [{"key": f"k{i}", "value": value, "partition": 0} for i in range(16)]}
    with httpx.Client(timeout=120) as http:
        for _ in range(max(1, (mb << 20) // (16 * VALUE))):
            r = http.post(f"{node.url}/v1/topics/moves/messages", json=batch)
            r.raise_for_status()


class _Profiles:
    """py-spy recordings (speedscope, idle threads too) of the source and the target during each move,
    when the run asks for them (`--profile DIR`): where the time from the request to the first acknowledged
    produce goes on each node."""

    def __init__(self, out: Path | None) -> None:
        self.out = out
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, nodes: dict[str, ServeProcess]) -> None:
        if self.out is None:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        spy = str(Path(sys.executable).parent / "py-spy")
        for role, node in nodes.items():
            path = self.out / f"{name}-{role}.speedscope.json"  # per thread, the samples in time order
            self.procs.append(subprocess.Popen([spy, "record", "--pid", str(node.proc.pid), "--rate", "200",
                                                "--idle", "--threads", "--format", "speedscope", "--output", str(path)],
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1.0)  # py-spy attaches before the move starts

    def stop(self) -> None:
        for p in self.procs:
            p.send_signal(signal.SIGINT)
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []


def _move(source: ServeProcess, target: ServeProcess, to: int) -> dict[str, float]:
    """One move under a producer that follows the partition as a client does: it produces to the source before the
    request, follows the 421 to the target and retries the 503 answers there. Measured: request -> first
    acknowledged produce on the target, and the producer's error window: from its last acknowledgement by the
    source to its first by the target (no produce succeeds in between)."""
    first_ack: list[float] = []
    ack_request: list[float] = []  # how long the produce that was acknowledged first took
    last_source_ack: list[float] = []
    errors = [0]
    stop = threading.Event()
    producing = threading.Event()  # acknowledged by the source at least once: the move may be asked for

    def produce() -> None:
        base = source.url
        with httpx.Client(timeout=60) as http:
            while not stop.is_set():
                sent = time.perf_counter()
                r = http.post(f"{base}/v1/topics/moves/messages",
                              json={"messages": [{"key": "after", "value": "v", "partition": 0}]})
                now = time.perf_counter()
                if r.status_code == 200:
                    if base == target.url:
                        first_ack.append(now)
                        ack_request.append(now - sent)
                        return
                    last_source_ack[:] = [now]
                    producing.set()
                    continue
                errors[0] += 1
                if r.status_code == 421 and r.json().get("leader_url"):
                    base = target.url if r.json()["leader_url"].rstrip("/") == target.url.rstrip("/") else source.url
                else:
                    time.sleep(0.002)

    cpu0 = process_cpu_s(source.proc.pid), process_cpu_s(target.proc.pid)
    t = threading.Thread(target=produce)
    t.start()
    if not producing.wait(60):
        stop.set()
        raise RuntimeError("the source acknowledged no produce")
    started_wall = time.time()  # beside the nodes' log times
    started = time.perf_counter()
    r = httpx.post(f"{source.url}/v1/admin/reassignments", json={"topic": "moves", "partition": 0, "to": to},
                   timeout=300)
    r.raise_for_status()
    answered = time.perf_counter()
    t.join(300)
    stop.set()
    cpu1 = process_cpu_s(source.proc.pid), process_cpu_s(target.proc.pid)
    if not first_ack:
        raise RuntimeError("no acknowledged produce on the target")
    return {"to_first_ack_s": first_ack[0] - started, "request_s": answered - started, "producer_errors": errors[0],
            "error_window_s": first_ack[0] - last_source_ack[0],
            "source_cpu_s": cpu1[0] - cpu0[0], "target_cpu_s": cpu1[1] - cpu0[1], "started_wall": started_wall,
            "ack_request_s": ack_request[0]}


def _partition_end(node: ServeProcess) -> tuple[bool, int]:
    """(whether `node` serves partition 0 of `moves`, its end offset there): the acknowledged end where it serves
    it, the end committed to the object store where it does not."""
    rows = httpx.get(f"{node.url}/v1/console/partitions", params={"topic": "moves"}, timeout=60).json()["partitions"]
    row = next(r for r in rows if r["partition"] == 0)
    return bool(row["owned"]), int(row["end_offset"])


def _settle(leader: ServeProcess, other: ServeProcess, timeout_s: float = 900.0) -> float:
    """Wait until what the last move left to do in the background is done: the new leader has read the moved range
    from the previous one's WAL and uploaded it (the end committed, as the other node sees it, is the leader's
    acknowledged end). Each measured move then starts from the same state, the source holding only the bytes of
    that move unuploaded and uploading nothing. Returns the seconds waited."""
    started = time.perf_counter()
    owned, end = _partition_end(leader)
    if not owned:
        raise RuntimeError("the target does not serve the partition after the move")
    while _partition_end(other)[1] < end:
        if time.perf_counter() - started > timeout_s:
            raise RuntimeError(f"the moved range not uploaded after {timeout_s:.0f} s")
        time.sleep(0.2)
    return time.perf_counter() - started


def _skewed_producer(nodes: list[ServeProcess], stop: threading.Event, partitions: int, hot: int) -> None:
    """Rounds of one request per partition to its leader (following 421s): ten values to `hot`, one to each other."""
    where = {p: nodes[0].url for p in range(partitions)}
    value = "v" * 4000
    with httpx.Client(timeout=60) as http:
        while not stop.is_set():
            for p in range(partitions):
                msgs = [{"key": f"k{p}-{i}", "value": value, "partition": p} for i in range(10 if p == hot else 1)]
                for _ in range(20):
                    r = http.post(f"{where[p]}/v1/topics/skew/messages", json={"messages": msgs})
                    if r.status_code == 421:
                        where[p] = r.json()["leader_url"]
                        continue
                    if r.status_code == 200:
                        break
                    time.sleep(0.02)


def _balance(work: Path, store: str, meta: str, seconds: float) -> dict[str, float]:
    """Three nodes with short balancer settings (reports every second, 5 s over the mean before a move), six
    partitions two by two, one of them at ten times the others' bytes: the time until the balancer has left the
    hot partition alone on its node, and its moves over `seconds`."""
    nodes = [ServeProcess(work / f"node{i}", [
        "--store", store, "--metadata", meta, "--node-id", str(i), "--lease-ms", "3000",
        "--auto-balance-report-s", "1", "--auto-balance-sustain-s", "5", "--auto-balance-threshold", "0.3"],
        work / f"node{i}.log", what=f"node {i}") for i in range(3)]
    stop = threading.Event()
    try:
        r = httpx.post(f"{nodes[0].url}/v1/topics", json={"name": "skew", "partitions": 6}, timeout=60)
        r.raise_for_status()

        def leads() -> dict[int, int]:
            body = httpx.get(f"{nodes[0].url}/v1/cluster/nodes", timeout=30).json()
            return {int(p.rsplit("-", 1)[1]): n["node_id"] for n in body["nodes"] for p in n["partitions"]}

        def auto_moves() -> int:
            got = httpx.get(f"{nodes[0].url}/v1/cluster/moves", timeout=30).json()["moves"]
            return sum(1 for m in got if m["kind"] == "auto")

        hot = 0
        t = threading.Thread(target=_skewed_producer, args=(nodes, stop, 6, hot), daemon=True)
        started = time.perf_counter()
        t.start()
        balanced_s = float("nan")
        moves_at_balance = 0
        while time.perf_counter() - started < seconds:
            lead = leads()
            if balanced_s != balanced_s and len(lead) == 6 and list(lead.values()).count(lead[hot]) == 1:
                balanced_s, moves_at_balance = time.perf_counter() - started, auto_moves()
            time.sleep(0.5)
        total = auto_moves()
        return {"skew_to_balanced_s": balanced_s, "moves_to_balance": moves_at_balance, "moves": total,
                "moves_after_balanced": total - moves_at_balance, "window_s": seconds}
    finally:
        stop.set()
        for n in nodes:
            n.stop()


def _raw_upload_s(store_url: str, mb: int) -> float:
    store = open_store(store_url)
    part = os.urandom(8 << 20)
    try:
        started = time.perf_counter()
        keys = []
        for i in range(max(1, mb // 8)):
            key = f"bench-raw/{uuid.uuid4().hex}-{i}"
            store.put(key, part)
            keys.append(key)
        took = time.perf_counter() - started
        store.delete(keys)
        return took
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mqindex bench reassign", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes-mb", default="10,256", help="unuploaded data at the move, MiB (comma separated)")
    ap.add_argument("--moves", type=int, default=20, help="moves per size (default 20)")
    ap.add_argument("--big-moves", type=int, default=5, help="moves for sizes of 100 MiB and more (default 5)")
    ap.add_argument("--wal", default="shared",
                    help="WAL kinds to measure, comma separated: shared (the WAL on the store: a move lends what is "
                         "not uploaded to the target) and/or local (a move uploads it first); default shared")
    ap.add_argument("--balance-s", type=float, default=90.0,
                    help="seconds of the auto-balance run under a skewed producer (0: none; default 90)")
    ap.add_argument("--settle", action=argparse.BooleanOptionalAction, default=True,
                    help="before each move, wait until the previous move's range is read and uploaded by its new "
                         "leader (default), so that no move's source is still uploading the previous move's bytes")
    ap.add_argument("--profile", type=Path,
                    help="directory for py-spy recordings of the source and the target during each move")
    ap.add_argument("--store", help="S3 store URL (default: SeaweedFS started for the run)")
    ap.add_argument("--metadata", default=os.environ.get("MQINDEX_TEST_PG", PG_DEFAULT),
                    help="PostgreSQL URL (a fresh schema is used)")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes_mb.split(",") if s]
    kinds = [k for k in args.wal.split(",") if k]
    if not kinds or set(kinds) - {"shared", "local"}:
        ap.error("--wal: shared and/or local")
    work = Path(tempfile.mkdtemp(prefix="mqindex-bench-reassign-"))
    store, weed = store_or_seaweedfs(args.store, work, f"reassign-{uuid.uuid4().hex[:8]}")
    schema = f"bench_reassign_{uuid.uuid4().hex[:8]}"
    sep = "&" if "?" in args.metadata else "?"
    meta = f"{args.metadata}{sep}schema={schema}"
    rows: list[list[object]] = []
    cpu_rows: list[list[object]] = []
    results: dict[str, object] = {}
    cores = os.cpu_count() or 1
    profiles = _Profiles(args.profile)
    try:
        for kind, mb in [(k, mb) for k in kinds for mb in sizes]:
            hold = (mb + 64) << 20
            run = work / f"{kind}-{mb}mb"
            run.mkdir(parents=True, exist_ok=True)
            nodes: list[ServeProcess] = []
            try:
                nodes += [node_process(run, i, store, meta + f"_{kind}_{mb}", hold,
                                       wal_url(store) if kind == "shared" else None) for i in range(2)]
                r = httpx.post(f"{nodes[0].url}/v1/topics", json={"name": "moves", "partitions": 1}, timeout=60)
                r.raise_for_status()
                leader = next(n["node_id"] for n in httpx.get(f"{nodes[0].url}/v1/cluster/nodes").json()["nodes"]
                              if "moves-0" in n["partitions"])
                moves = args.big_moves if mb >= 100 else args.moves
                samples = []
                for i in range(moves):
                    src, dst = leader, 1 - leader
                    _fill(nodes[src], mb)
                    profiles.start(f"{kind}-{mb}mb-{i}", {"source": nodes[src], "target": nodes[dst]})
                    try:
                        samples.append(_move(nodes[src], nodes[dst], dst))
                    finally:
                        profiles.stop()
                    leader = dst
                    if args.settle:
                        samples[-1]["settle_s"] = _settle(nodes[dst], nodes[src])
                    last = samples[-1]
                    print(f"[bench] {kind} WAL {mb} MiB: move {i + 1}/{moves} {last['to_first_ack_s']:.3f}s, producer "
                          f"error window {last['error_window_s']:.3f}s, settled in {last.get('settle_s', 0):.1f}s",
                          file=sys.stderr, flush=True)
                firsts = [s["to_first_ack_s"] for s in samples]
                raw = _raw_upload_s(store, mb)
                p50, p99 = percentile(firsts, 50), percentile(firsts, 99)
                results[f"{kind}-{mb}MiB"] = {"samples": samples, "raw_upload_s": raw}
                rows.append([kind, mb, moves, f"{p50:.3f}", f"{p99:.3f}",
                             f"{percentile([s['request_s'] for s in samples], 50):.3f}",
                             f"{percentile([s['producer_errors'] for s in samples], 50):.0f}",
                             f"{percentile([s['error_window_s'] for s in samples], 50):.3f}",
                             f"{max(s['error_window_s'] for s in samples):.3f}",
                             f"{raw:.3f}", f"{p50 / raw:.2f}" if raw else "-"])
                cpu = percentile([s["source_cpu_s"] + s["target_cpu_s"] for s in samples], 50)
                cpu_rows.append([kind, mb, f"{percentile([s['source_cpu_s'] for s in samples], 50) * 1000:.0f}",
                                 f"{percentile([s['target_cpu_s'] for s in samples], 50) * 1000:.0f}",
                                 f"{cpu * 1000:.0f}", f"{cores / max(cpu, 1e-9):.1f}"])
            finally:
                for n in nodes:
                    n.stop()
        if args.balance_s > 0:
            (work / "balance").mkdir(parents=True, exist_ok=True)
            results["balance"] = b = _balance(work / "balance", store, meta + "_balance", args.balance_s)
            emit(table(f"auto-balance: a partition at 10x the others' bytes on 3 nodes, {args.balance_s:.0f} s",
                       ["skew -> balanced s", "moves to balance", "moves after that", "moves in all"],
                       [[f"{b['skew_to_balanced_s']:.1f}", b["moves_to_balance"], b["moves_after_balanced"],
                         b["moves"]]]))
    finally:
        if weed is not None:
            weed.stop()
    emit(table("reassignment: request -> first acknowledged produce on the target",
               ["WAL", "unuploaded MiB", "moves", "p50 s", "p99 s", "request p50 s", "producer 503/421 p50",
                "producer error window p50 s", "max s",
                "raw upload of the same bytes s", "p50 / raw upload"], rows))
    emit(table("server CPU per move, request -> first acknowledged produce (the target's background read of the "
               "moved range not included)",
               ["WAL", "unuploaded MiB", "source CPU ms p50", "target CPU ms p50", "both ms p50",
                f"ceiling moves/s ({cores} cores)"], cpu_rows))
    save_results("reassign", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
