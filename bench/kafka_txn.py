"""Kafka transactions benchmark (`mqindex bench kafka --transactions`): one real `mqindex serve` process with its
Kafka listener, confluent-kafka (librdkafka) on both sides of each ratio, in the same run.

1. produce: a transactional producer (begin, --txn-size 1 KiB records spread over the topic's partitions,
   commit; again) against the same client as an idempotent, non-transactional producer (acks=all, linger 5 ms),
   the same records, the same topic; MB/s, the ratio (goal >= 0.7x at 100 records per transaction), the
   server's CPU per MiB and per transaction and the rates the machine's cores allow at that cost (the ceilings).
   A third row, the same idempotent producer flushing after every --txn-size records, is what a transaction's
   records alone cost: commit_transaction() flushes them and waits for their acknowledgements before EndTxn, so
   no transactional producer of this client can go faster than it, and the transactional row's ratio to it is
   what the transaction itself (AddPartitionsToTxn, EndTxn, the markers) costs.
2. commit markers, end to end: small transactions, one at a time, with a read_committed consumer following the
   topic; for each, the time commit_transaction() takes (EndTxn: answered once the decision is stored; the
   markers follow) and the time from calling it until the consumer has received the transaction's last record
   (a marker durable on every partition made it visible, and the fetch that waited for it answered).
3. transaction size (--txn-sizes): the transactional producer again at each number of records per transaction,
   against the idempotent producer of 1.: where a transaction's fixed cost (its round trips, the decision, the
   markers) stops mattering, which is what an application chooses with its commit interval.
4. producers at once (--txn-producers): that many transactional producers (--txn-size records a transaction,
   each its own transactional id, each in a thread of its own: librdkafka releases the GIL while it waits)
   against as many idempotent producers, all at once: the aggregate rates, where one producer's wait for its
   round trips no longer sets the pace; the server's CPU per MiB does, and on a small machine the clients' own
   CPU (printed beside it) too.
5. the client alone: the idempotent, flushed and transactional producers of 1. against a peer that answers at
   once and stores nothing (bench/kafka_null_peer.py, not a broker): the client's own time per round, which no
   server removes; its transactional rate over this server's idempotent rate is the ceiling of the ratio of 1.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import emit, percentile, progress, save_results, table, wait_quiet

KiB, MiB = 1024, 1024 * 1024
RECORD = KiB


def _producer(bootstrap: str, **extra: Any) -> Any:
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "compression.type": "none",
                     "enable.idempotence": True, "queue.buffering.max.messages": 1_000_000, **extra})


def _send(p: Any, topic: str, value: bytes, key: bytes, failed: list[str], i: int = 1) -> None:
    """Produce one record; every producer loop serves its delivery reports every 1,000 records (`i`, the loop's
    count), so none of them runs thousands of delivery callbacks inside a flush or a commit."""
    def done(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    while True:
        try:
            p.produce(topic, value, key=key, on_delivery=done)
            break
        except BufferError:
            p.poll(0.005)
    if i % 1000 == 999:
        p.poll(0)


def idempotent_produce(server: Any, topic: str, records: int) -> dict[str, Any]:
    p = _producer(server.bootstrap)
    value, failed = os.urandom(RECORD), []
    for i in range(100):  # warm: metadata fetched, producer id, connections open
        _send(p, topic, value, f"warm-{i}".encode(), failed)
    p.flush(60)
    clock = _Clock(server)
    for i in range(records):
        _send(p, topic, value, str(i).encode(), failed, i)
    left = p.flush(300)
    secs, cpu, client = clock.stop()
    if left or failed:
        raise RuntimeError(f"idempotent produce: {left} not delivered, {len(failed)} failed ({failed[:3]})")
    return _figures(records, secs, cpu, client)


def flushed_produce(server: Any, topic: str, records: int, per_flush: int) -> dict[str, Any]:
    """The idempotent producer, flushed (every record acknowledged) after each `per_flush` records: a
    transaction's records without the transaction (module doc, 1.)."""
    p = _producer(server.bootstrap)
    value, failed = os.urandom(RECORD), []
    for i in range(100):
        _send(p, topic, value, f"warm-{i}".encode(), failed)
    p.flush(60)
    flushes: list[float] = []
    clock = _Clock(server)
    rounds = max(1, records // per_flush)
    for t in range(rounds):
        for i in range(per_flush):
            _send(p, topic, value, f"{t}-{i}".encode(), failed, i)
        c0 = time.perf_counter()
        if p.flush(60):
            raise RuntimeError("flushed produce: records not delivered within 60 s")
        flushes.append(time.perf_counter() - c0)
    secs, cpu, client = clock.stop()
    if failed:
        raise RuntimeError(f"flushed produce: {len(failed)} failed ({failed[:3]})")
    out = _figures(rounds * per_flush, secs, cpu, client)
    out.update(rounds=rounds, server_cpu_ms_round=1000 * cpu / rounds, flush_p50_ms=percentile(flushes, 50) * 1000,
               flush_p99_ms=percentile(flushes, 99) * 1000, requests=clock.requests)
    return out


def transactional_produce(server: Any, topic: str, records: int, per_txn: int) -> dict[str, Any]:
    p = _producer(server.bootstrap, **{"transactional.id": f"bench-txn-{time.monotonic_ns()}"})
    p.init_transactions(60)
    value, failed = os.urandom(RECORD), []
    p.begin_transaction()
    for i in range(100):
        _send(p, topic, value, f"warm-{i}".encode(), failed)
    p.commit_transaction(60)
    commits: list[float] = []
    clock = _Clock(server)
    txns = max(1, records // per_txn)
    step = max(1, txns // 5)
    for t in range(txns):
        p.begin_transaction()
        for i in range(per_txn):
            _send(p, topic, value, f"{t}-{i}".encode(), failed, i)
        c0 = time.perf_counter()
        p.commit_transaction(60)  # flushes the transaction's records, then EndTxn
        commits.append(time.perf_counter() - c0)
        if (t + 1) % step == 0:
            progress("transactional produce", t + 1, txns, clock.t0)
    secs, cpu, client = clock.stop()
    if failed:
        raise RuntimeError(f"transactional produce: {len(failed)} failed ({failed[:3]})")
    out = _figures(txns * per_txn, secs, cpu, client)
    cpu_txn = 1000 * cpu / txns
    out.update(transactions=txns, transactions_s=txns / secs, server_cpu_ms_txn=cpu_txn,
               cpu_ceiling_txn_s=(os.cpu_count() or 1) * 1000 / max(cpu_txn, 1e-9),
               commit_p50_ms=percentile(commits, 50) * 1000, commit_p99_ms=percentile(commits, 99) * 1000,
               requests=clock.requests)
    return out


def concurrent_produce(server: Any, topic: str, producers: int, records_each: int, per_txn: int | None
                       ) -> dict[str, Any]:
    """`producers` producers at once (module doc, 4.): transactional ones with `per_txn` records a transaction,
    or idempotent pipelined ones when `per_txn` is None; the aggregate figures."""
    value = os.urandom(RECORD)
    failed: list[str] = []
    started = threading.Barrier(producers + 1)
    errors: list[BaseException] = []
    clients = []
    for n in range(producers):  # made and warmed before the clock starts: ids, metadata, connections
        extra = {"transactional.id": f"bench-conc-{n}-{time.monotonic_ns()}"} if per_txn else {}
        p = _producer(server.bootstrap, **extra)
        if per_txn:
            p.init_transactions(60)
            p.begin_transaction()
        for i in range(100):
            _send(p, topic, value, f"warm-{n}-{i}".encode(), failed)
        if per_txn:
            p.commit_transaction(60)
        elif p.flush(60):
            raise RuntimeError("concurrent produce: warm-up records not delivered within 60 s")
        clients.append(p)

    def one(n: int, p: Any) -> None:
        try:
            started.wait(60)
            if per_txn is None:
                for i in range(records_each):
                    _send(p, topic, value, f"{n}-{i}".encode(), failed, i)
                if p.flush(300):
                    raise RuntimeError(f"producer {n}: records not delivered within 300 s")
                return
            for t in range(records_each // per_txn):
                p.begin_transaction()
                for i in range(per_txn):
                    _send(p, topic, value, f"{n}-{t}-{i}".encode(), failed, i)
                p.commit_transaction(60)
        except BaseException as exc:  # noqa: BLE001 - raised by the caller, with the others' results
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(n, p), name=f"producer-{n}") for n, p in enumerate(clients)]
    for t in threads:
        t.start()
    clock = _Clock(server)
    started.wait(60)
    for t in threads:
        t.join()
    secs, cpu, client = clock.stop()
    if errors or failed:
        raise RuntimeError(f"concurrent produce: {errors[:1]} {len(failed)} failed ({failed[:3]})")
    total = producers * (records_each // per_txn * per_txn if per_txn else records_each)
    out = _figures(total, secs, cpu, client)
    if per_txn:
        txns = total // per_txn
        out.update(transactions=txns, transactions_s=txns / secs, server_cpu_ms_txn=1000 * cpu / txns)
    return out


def request_totals(server: Any) -> dict[str, tuple[float, float]]:
    """API name -> (requests answered, seconds in the server) so far: mqindex_kafka_request_seconds of /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    if server.url is None:  # the null peer (bench/kafka_null_peer.py): no /metrics
        return {}
    out: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(httpx.get(server.url + "/metrics", timeout=30).text):
        if family.name == "mqindex_kafka_request_seconds":
            for sample in family.samples:
                if sample.name.endswith(("_count", "_sum")):
                    at = 0 if sample.name.endswith("_count") else 1
                    out.setdefault(sample.labels["api"], [0.0, 0.0])[at] = sample.value
    return {api: (c, s) for api, (c, s) in out.items()}


class _Clock:
    """Wall time, the server's CPU and this process's (the clients': Python and librdkafka's threads) from now;
    `requests` after stop(): API name -> (requests, mean ms in the server) over the same span."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.requests0 = request_totals(server)
        self.requests: dict[str, tuple[float, float]] = {}
        self.cpu0, self.client0, self.t0 = server.cpu_s(), time.process_time(), time.perf_counter()

    def stop(self) -> tuple[float, float, float]:
        out = (time.perf_counter() - self.t0, self.server.cpu_s() - self.cpu0, time.process_time() - self.client0)
        for api, (count, secs) in request_totals(self.server).items():
            c0, s0 = self.requests0.get(api, (0.0, 0.0))
            if count > c0:
                self.requests[api] = (count - c0, 1000 * (secs - s0) / (count - c0))
        return out


def _figures(records: int, secs: float, cpu: float, client: float) -> dict[str, Any]:
    mib = records * RECORD / MiB
    per_mib = 1000 * cpu / mib
    return {"records": records, "seconds": secs, "mb_s": mib / secs, "records_s": records / secs,
            "server_cpu_ms_mib": per_mib, "cpu_ceiling_mb_s": (os.cpu_count() or 1) * 1000 / max(per_mib, 1e-9),
            "client_cpu_ms_mib": 1000 * client / mib}


def _round_row(name: str, r: dict[str, Any], rounds: int, per_round: int, idem_mb_s: float) -> list[Any]:
    """One row of the round-time table: the wall time of a round split into the server's time on its critical
    path (one request of each API it waits for in turn) and the rest, and what the rest alone would allow."""
    wall = 1000 * r["seconds"] / rounds
    reqs = r.get("requests", {})
    seen = [api for api in ("AddPartitionsToTxn", "Produce", "EndTxn") if api in reqs]  # a round waits for each
    per = {api: reqs[api][1] for api in seen}
    shown = ", ".join(f"{api} {reqs[api][0] / rounds:.1f}" for api in seen)
    critical = sum(per.values())
    rest = max(wall - critical, 1e-9)
    at_once = per_round * RECORD / MiB / (rest / 1000)
    return [name, wall, shown, per.get("AddPartitionsToTxn", ""), per.get("Produce", ""), per.get("EndTxn", ""),
            critical, rest, at_once, at_once / idem_mb_s]


def marker_latency(server: Any, topic: str, partitions: int, txns: int, per_txn: int) -> dict[str, Any]:
    """One transaction at a time (module doc, 2.): commit_transaction() time and commit-to-visible time."""
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"bench-rc-{time.monotonic_ns()}",
                  "isolation.level": "read_committed", "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    seen: dict[int, float] = {}
    stop = threading.Event()
    c.assign([TopicPartition(topic, i, OFFSET_END) for i in range(partitions)])
    for _ in range(50):  # the assignment resolved: reading from the end of each partition
        c.poll(0.1)

    def follow() -> None:
        while not stop.is_set():
            m = c.poll(0.05)
            if m is not None and m.error() is None and m.key() and m.key().startswith(b"last-"):
                seen[int(m.key()[5:])] = time.perf_counter()

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    p = _producer(server.bootstrap, **{"transactional.id": f"bench-marker-{time.monotonic_ns()}"})
    p.init_transactions(60)
    value, failed = os.urandom(RECORD), []
    commits, visible = [], []
    try:
        for t in range(txns):
            p.begin_transaction()
            for i in range(per_txn - 1):
                _send(p, topic, value, f"m{t}-{i}".encode(), failed)
            _send(p, topic, value, f"last-{t}".encode(), failed)
            p.flush(60)  # the records are stored: what follows is the commit alone
            c0 = time.perf_counter()
            p.commit_transaction(60)
            commits.append(time.perf_counter() - c0)
            deadline = time.monotonic() + 30
            while t not in seen:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"transaction {t}'s last record not read within 30 s (read_committed)")
                time.sleep(0.001)
            visible.append(seen[t] - c0)
    finally:
        stop.set()
        reader.join(10)
        c.close()
    if failed:
        raise RuntimeError(f"marker latency: {len(failed)} failed ({failed[:3]})")
    return {"transactions": txns, "commit_p50_ms": percentile(commits, 50) * 1000,
            "commit_p99_ms": percentile(commits, 99) * 1000, "visible_p50_ms": percentile(visible, 50) * 1000,
            "visible_p99_ms": percentile(visible, 99) * 1000}


def run(work: Path, store: str, server_type: Any, partitions: int, records: int, per_txn: int,
        latency_txns: int, sizes: list[int] | None = None, producers: int = 0) -> dict[str, Any]:
    """Every phase on one fresh server; prints the tables and saves the figures."""
    sizes = sizes or []
    load_before = os.getloadavg()
    server = server_type(work, "txn-node", store).start()
    try:
        server.create_topic("bench-idem", partitions)
        server.create_topic("bench-flushed", partitions)
        server.create_topic("bench-txn", partitions)
        server.create_topic("bench-marker", partitions)
        for size in sizes:
            server.create_topic(f"bench-size-{size}", partitions)
        if producers:
            server.create_topic("bench-conc-idem", partitions)
            server.create_topic("bench-conc-txn", partitions)
        quiet: dict[str, float] = {}

        def phase(name: str) -> None:  # each phase begins once the last one's background work is done
            quiet[name] = wait_quiet(server.proc.pid)
            print(f"[bench] {name} (the server quiet after {quiet[name]:.0f} s)", file=sys.stderr, flush=True)

        phase("idempotent produce")
        idem = idempotent_produce(server, "bench-idem", records)
        phase(f"idempotent produce flushed every {per_txn} records")
        flushed = flushed_produce(server, "bench-flushed", records, per_txn)
        phase("transactional produce")
        txn = transactional_produce(server, "bench-txn", records, per_txn)
        phase("commit marker latency")
        lat = marker_latency(server, "bench-marker", partitions, latency_txns, 10)
        by_size = {}
        for size in sizes:  # at least 10 transactions of each size, and as many records as the rows above
            n = max(records, 10 * size) // size * size
            phase(f"transaction size {size}: {n // size} transactions")
            by_size[size] = transactional_produce(server, f"bench-size-{size}", n, size)
        conc = {}
        if producers:
            each = max(per_txn, records // producers)
            phase(f"{producers} idempotent producers at once")
            conc["idempotent"] = concurrent_produce(server, "bench-conc-idem", producers, each, None)
            phase(f"{producers} transactional producers at once")
            conc["transactional"] = concurrent_produce(server, "bench-conc-txn", producers, each, per_txn)
    finally:
        server.stop()
    # the client alone (module doc, 5.): the same producers against a peer that answers at once
    from bench.kafka_null_peer import NullPeer

    print("[bench] the client alone: the producers against the null peer", file=sys.stderr, flush=True)
    peer = NullPeer(partitions).start()
    try:
        alone = {"idempotent": idempotent_produce(peer, "null", records),
                 "flushed": flushed_produce(peer, "null", records, per_txn),
                 "transactional": transactional_produce(peer, "null", records, per_txn)}
        if producers:
            alone["concurrent_transactional"] = concurrent_produce(peer, "null", producers,
                                                                   max(per_txn, records // producers), per_txn)
    finally:
        peer.stop()
    load_after = os.getloadavg()
    results = {"idempotent": idem, "flushed": flushed, "transactional": txn, "markers": lat, "partitions": partitions,
               "records_per_transaction": per_txn, "load_before": load_before, "load_after": load_after,
               "by_size": by_size, "producers": producers, "concurrent": conc, "quiet_s": quiet,
               "client_alone": alone}
    cores = os.cpu_count() or 1
    emit(f"load average (1, 5, 15 min) before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
         f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    emit(table(f"Kafka transactional vs idempotent produce, same client (confluent-kafka, acks=all, linger 5 ms), "
               f"{records} records of 1 KiB, {partitions} partitions, {per_txn} records per transaction",
               ["", "MB/s", "records/s", "ratio", "ratio to the flushed row", "commit (flush) p50 ms",
                "commit (flush) p99 ms", "server CPU ms/MiB", f"CPU ceiling MB/s ({cores} cores)",
                "client CPU ms/MiB"],
               [["idempotent (enable.idempotence)", idem["mb_s"], idem["records_s"], 1.0, "", "", "",
                 idem["server_cpu_ms_mib"], idem["cpu_ceiling_mb_s"], idem["client_cpu_ms_mib"]],
                [f"idempotent, flushed every {per_txn} records ({flushed['rounds']} flushes)", flushed["mb_s"],
                 flushed["records_s"], flushed["mb_s"] / idem["mb_s"], 1.0, flushed["flush_p50_ms"],
                 flushed["flush_p99_ms"], flushed["server_cpu_ms_mib"], flushed["cpu_ceiling_mb_s"],
                 flushed["client_cpu_ms_mib"]],
                [f"transactional ({txn['transactions']} transactions)", txn["mb_s"], txn["records_s"],
                 txn["mb_s"] / idem["mb_s"], txn["mb_s"] / flushed["mb_s"], txn["commit_p50_ms"],
                 txn["commit_p99_ms"], txn["server_cpu_ms_mib"], txn["cpu_ceiling_mb_s"], txn["client_cpu_ms_mib"]]]))
    emit(table(f"Transactions ({per_txn} records each): rate and server CPU, against the flushed idempotent producer",
               ["", "per second", "server CPU ms each", f"CPU ceiling per second ({cores} cores)"],
               [["transactions", txn["transactions_s"], txn["server_cpu_ms_txn"], txn["cpu_ceiling_txn_s"]],
                [f"flushes of {per_txn} records", flushed["rounds"] / flushed["seconds"],
                 flushed["server_cpu_ms_round"], cores * 1000 / max(flushed["server_cpu_ms_round"], 1e-9)]]))
    emit(table(f"Where a round's wall time goes, one producer ({per_txn} records a round): the server's time per "
               "request from its mqindex_kafka_request_seconds (read to answer written; a round's Produce requests "
               "run side by side, so one counts on its critical path), the rest is the client's and the network's",
               ["", "wall ms a round", "requests a round", "AddPartitionsToTxn ms", "Produce ms (mean)", "EndTxn ms",
                "server ms on the critical path", "the rest ms (client, network)",
                "MB/s with a server answering at once", "its ratio to the idempotent row"],
               [_round_row(f"idempotent, flushed every {per_txn} records", flushed, flushed["rounds"], per_txn,
                           idem["mb_s"]),
                _round_row("transactional", txn, txn["transactions"], per_txn, idem["mb_s"])]))
    a_idem, a_flushed, a_txn = alone["idempotent"], alone["flushed"], alone["transactional"]
    emit(table(f"The client alone: the same producers against a peer that answers at once and stores nothing "
               f"(bench/kafka_null_peer.py, not a broker; {records} records, {per_txn} a round): what no server "
               "can make faster",
               ["", "MB/s", "ms a round", "peer CPU ms a round", "ratio to this server's idempotent row"],
               [["idempotent (pipelined)", a_idem["mb_s"], "", "", a_idem["mb_s"] / idem["mb_s"]],
                [f"idempotent, flushed every {per_txn} records", a_flushed["mb_s"],
                 1000 * a_flushed["seconds"] / a_flushed["rounds"], a_flushed["server_cpu_ms_round"],
                 a_flushed["mb_s"] / idem["mb_s"]],
                ["transactional", a_txn["mb_s"], 1000 * a_txn["seconds"] / a_txn["transactions"],
                 a_txn["server_cpu_ms_txn"], a_txn["mb_s"] / idem["mb_s"]]]))
    emit(f"ceiling of the transactional ratio with this client at {per_txn} records a transaction: "
         f"{a_txn['mb_s']:.1f} MB/s (against the null peer) / {idem['mb_s']:.1f} MB/s (this server's idempotent "
         f"row) = {a_txn['mb_s'] / idem['mb_s']:.2f}x; measured on this server {txn['mb_s'] / idem['mb_s']:.2f}x, "
         f"{txn['mb_s'] / a_txn['mb_s']:.2f} of the ceiling")
    emit(table(f"Commit markers end to end ({lat['transactions']} transactions of 10 records over {partitions} "
               "partitions, one at a time, a read_committed consumer following)",
               ["", "p50 ms", "p99 ms"],
               [["commit_transaction() (EndTxn: the decision stored)", lat["commit_p50_ms"],
                 lat["commit_p99_ms"]],
                ["commit call to the last record read by the read_committed consumer", lat["visible_p50_ms"],
                 lat["visible_p99_ms"]]]))
    if by_size:
        emit(table("Transaction size: the transactional producer at each number of records per transaction, against "
                   f"the idempotent producer above ({idem['mb_s']:.1f} MB/s)",
                   ["records per transaction", "transactions", "MB/s", "ratio", "transactions/s",
                    "server CPU ms/transaction", "server CPU ms/MiB", "commit p50 ms", "commit p99 ms"],
                   [[size, r["transactions"], r["mb_s"], r["mb_s"] / idem["mb_s"], r["transactions_s"],
                     r["server_cpu_ms_txn"], r["server_cpu_ms_mib"], r["commit_p50_ms"], r["commit_p99_ms"]]
                    for size, r in by_size.items()]))
    if conc:
        ci, ct = conc["idempotent"], conc["transactional"]
        ca = alone["concurrent_transactional"]
        emit(table(f"{producers} producers at once, {ci['records']} (idempotent) and {ct['records']} (transactional) "
                   "records of 1 KiB in all: transactional "
                   f"({per_txn} records a transaction) against idempotent (pipelined)",
                   ["", "MB/s (all producers)", "ratio", "transactions/s", "server CPU ms/MiB",
                    f"CPU ceiling MB/s ({cores} cores)", "clients' CPU ms/MiB"],
                   [[f"{producers} idempotent producers", ci["mb_s"], 1.0, "", ci["server_cpu_ms_mib"],
                     ci["cpu_ceiling_mb_s"], ci["client_cpu_ms_mib"]],
                    [f"{producers} transactional producers", ct["mb_s"], ct["mb_s"] / ci["mb_s"], ct["transactions_s"],
                     ct["server_cpu_ms_mib"], ct["cpu_ceiling_mb_s"], ct["client_cpu_ms_mib"]],
                    [f"{producers} transactional producers against the null peer (the client alone)", ca["mb_s"],
                     ca["mb_s"] / ci["mb_s"], ca["transactions_s"], ca["server_cpu_ms_mib"], ca["cpu_ceiling_mb_s"],
                     ca["client_cpu_ms_mib"]]]))
    path = save_results("kafka-transactions", results)
    emit(f"raw figures: {path}")
    return results
