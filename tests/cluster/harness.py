"""Several real `mqindex serve` processes on one PostgreSQL metadata database and one SeaweedFS bucket, a
producer that follows the cluster (421 to the leader, retry elsewhere when a node is gone), and the checks
every cluster test makes: every acknowledged message found by key and by id from every node, offsets
contiguous, nothing twice."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.api.server import ServerProcess, free_port

TOPIC = "orders"
KEYS = 40


class Cluster:
    def __init__(self, tmp: Path, store: str, meta: str, *extra: str) -> None:
        self.tmp, self.store, self.meta = tmp, store, meta
        self.extra = list(extra)  # more `serve` flags for every node
        self.nodes: dict[int, ServerProcess] = {}
        self.env: dict[int, dict[str, str]] = {}  # more environment variables of a node's next start

    def start(self, node_id: int) -> ServerProcess:
        s = ServerProcess(self.tmp / f"node{node_id}", "--store", self.store, "--metadata", self.meta,
                          "--node-id", str(node_id), "--lease-ms", "3000", *self.extra, env=self.env.get(node_id))
        self.nodes[node_id] = s.start()
        return s

    def start_with_kafka(self, node_id: int) -> ServerProcess:
        """As start, with a Kafka listener of the node's own (its port in the process's `kafka_port`)."""
        port = free_port()
        s = ServerProcess(self.tmp / f"node{node_id}", "--store", self.store, "--metadata", self.meta,
                          "--node-id", str(node_id), "--lease-ms", "3000", "--kafka-listener", f"127.0.0.1:{port}",
                          *self.extra)
        s.kafka_port = port  # type: ignore[attr-defined]
        self.nodes[node_id] = s.start()
        return s

    def wait_seen(self, count: int, timeout: float = 30) -> None:
        """Until every running node lists `count` nodes."""
        wait_until(lambda: all(len(httpx.get(f"{self.url(n)}/v1/cluster/nodes", timeout=10).json()["nodes"]) == count
                               for n in self.running()), timeout, f"every node to see {count}")

    def url(self, node_id: int) -> str:
        return self.nodes[node_id].url

    def running(self) -> list[int]:
        # a copy first: the producer thread asks while the test adds nodes (iterating a dict that grows raises)
        return sorted(n for n, s in dict(self.nodes).items() if s.proc is not None and s.proc.poll() is None)

    def leaders(self, via: int = 0) -> dict[int, list[str]]:
        body = httpx.get(f"{self.url(via)}/v1/cluster/nodes", timeout=10).json()
        return {n["node_id"]: n["partitions"] for n in body["nodes"] if n["state"] == "alive"}

    def index_rescue(self, dead: int, via: int = 0) -> dict[str, Any]:
        """The index rescue a failover of node `dead` reported (empty until one did)."""
        for f in httpx.get(f"{self.url(via)}/v1/cluster/failovers", timeout=10).json()["failovers"]:
            if f["node"] == dead and "index_rescue" in f:
                return dict(f["index_rescue"])
        return {}

    def stop_all(self) -> None:
        for s in self.nodes.values():
            if s.proc is not None and s.proc.poll() is None:
                s.stop(signal.SIGKILL)


@contextmanager
def started_with_topic(c: Cluster, topic: str, partitions: int, nodes: int = 3) -> Iterator[Cluster]:
    """Nodes 0..nodes-1 of `c` started and `topic` created; every node stopped afterwards, also on failure."""
    try:
        for i in range(nodes):
            c.start(i)
        r = httpx.post(f"{c.url(0)}/v1/topics", json={"name": topic, "partitions": partitions}, timeout=60)
        assert r.status_code == 201, r.text
        yield c
    finally:
        c.stop_all()


@contextmanager
def kafka_cluster(tmp: Path, store: str, meta: str, nodes: int) -> Iterator[Cluster]:
    """`nodes` nodes, each with a Kafka listener of its own, once every one lists them all; all stopped after."""
    c = Cluster(tmp, store, meta)
    try:
        for n in range(nodes):
            c.start_with_kafka(n)
        c.wait_seen(nodes)
        yield c
    finally:
        c.stop_all()


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    """Wait (polling) until `cond()` holds; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        time.sleep(0.1)


class Producer(threading.Thread):
    """Produces keyed messages through node 0, following 421s to the leader; records every ack."""

    def __init__(self, c: Cluster) -> None:
        super().__init__(daemon=True)
        self.c = c
        self.acked: list[dict[str, Any]] = []
        self.statuses: dict[int, int] = {}
        self.in_doubt: set[str] = set()  # values sent to a node that died before answering
        self.stop_flag = threading.Event()

    def run(self) -> None:
        i = 0
        with httpx.Client(timeout=30) as http:
            while not self.stop_flag.is_set():
                msg = {"key": f"k{i % KEYS}", "value": f"v{i}"}
                base = self.c.url(self.c.running()[0])
                for attempt in range(400):
                    try:
                        r = http.post(f"{base}/v1/topics/{TOPIC}/messages", json={"messages": [msg]})
                    except httpx.TransportError:
                        # the node it was sent to is gone: the message may or may not be stored, it was not
                        # acknowledged; go on with the next one through a running node
                        self.statuses[0] = self.statuses.get(0, 0) + 1
                        self.in_doubt.add(msg["value"])
                        time.sleep(0.05)
                        break
                    self.statuses[r.status_code] = self.statuses.get(r.status_code, 0) + 1
                    if r.status_code == 200:
                        self.acked.append({**msg, **r.json()["results"][0]})
                        break
                    if r.status_code == 421:
                        base = r.json()["leader_url"]
                        continue
                    if r.status_code == 503:
                        time.sleep(0.02)
                        running = self.c.running()
                        base = self.c.url(running[attempt % len(running)])
                        continue
                    return  # anything else is a failure the test reports
                i += 1

    def wait_acked(self, n: int, timeout_s: float = 120) -> None:
        """Until n messages are acknowledged or the producer has stopped; a failure past the bound."""
        deadline = time.monotonic() + timeout_s
        while len(self.acked) < n and self.is_alive():
            assert time.monotonic() < deadline, f"{len(self.acked)} of {n} acknowledged after {timeout_s} s: " \
                                                f"{self.statuses}"
            time.sleep(0.01)


def all_by_key(base: str, key: str) -> list[dict[str, Any]]:
    out, cursor = [], None
    while True:
        params: dict[str, Any] = {"topic": TOPIC, "key": key, "max": 500}
        if cursor:
            params["cursor"] = cursor
        body = httpx.get(f"{base}/v1/messages", params=params, timeout=60).json()
        out += body["messages"]
        cursor = body["next_cursor"]
        if not cursor:
            return out


def check_everything_found(c: Cluster, acked: list[dict[str, Any]], via: list[int],
                           in_doubt: set[str] | None = None) -> None:
    """Every acknowledged message by key (all pages) and by id from each node in `via`; nothing twice; nothing
    that was never sent (a message in doubt, sent to a node that died before answering, may be there)."""
    doubt = in_doubt or set()
    by_key: dict[str, set[tuple[int, int, str]]] = {}
    for a in acked:
        by_key.setdefault(a["key"], set()).add((a["partition"], a["offset"], a["value"]))
    for node in via:
        base = c.url(node)
        for key, want in by_key.items():
            got = all_by_key(base, key)
            seen = [(m["partition"], m["offset"], m["value"]) for m in got]
            assert len(seen) == len(set(seen)), f"duplicates for {key} from node {node}"
            assert want <= set(seen), f"node {node}, key {key}: missing {sorted(want - set(seen))[:5]}"
            extra = {v for _, _, v in set(seen) - want}
            assert extra <= doubt, f"node {node}, key {key}: never acknowledged nor in doubt: {sorted(extra)[:5]}"
            times = [m["timestamp"] for m in got]
            assert times == sorted(times, reverse=True)
        for a in acked[:: max(1, len(acked) // 40)]:
            r = httpx.get(f"{base}/v1/messages/{a['msg_id']}", timeout=30)
            assert r.status_code == 200 and r.json()["value"] == a["value"], (node, a, r.text)


def check_offsets(c: Cluster, acked: list[dict[str, Any]], partitions: int = 6) -> None:
    """Each partition read whole (following 421s): offsets 0..n-1 without a gap, every acknowledged message at
    its offset, no value stored twice."""
    by_offset = {(a["partition"], a["offset"]): a["value"] for a in acked}
    values: list[str] = []
    for p in range(partitions):
        base, offset, stored = c.url(c.running()[0]), 0, []
        deadline = time.monotonic() + 60
        while True:
            r = httpx.get(f"{base}/v1/topics/{TOPIC}/partitions/{p}/messages", params={"offset": offset, "max": 1000},
                          timeout=60)
            if r.status_code == 421:
                base = r.json()["leader_url"]
                continue
            if r.status_code == 503 and time.monotonic() < deadline:  # not served now (a move's target before it
                time.sleep(0.05)  # serves, a failover): retry
                continue
            assert r.status_code == 200, r.text
            body = r.json()
            if not body["messages"]:
                break
            stored += body["messages"]
            offset = body["next_offset"]
        assert [m["offset"] for m in stored] == list(range(len(stored))), f"partition {p}: offsets not contiguous"
        for m in stored:
            want = by_offset.get((p, m["offset"]))
            assert want is None or want == m["value"], (p, m["offset"], want, m["value"])
        values += [m["value"] for m in stored]
        assert {o for (q, o) in by_offset if q == p} <= {m["offset"] for m in stored}, f"partition {p}: acked missing"
    assert len(values) == len(set(values)), "a value stored twice"


def key_pages(base: str, key: str, begin: int, end: int, size: int, all_readable: bool = False,
              topic: str = TOPIC) -> list[list[tuple[int, int, int]]]:
    """Every page of a begin/end lookup of `key` in `topic`, `size` messages a page, following the cursor:
    (partition, offset, timestamp) each. all_readable: also check that no index file was reported unreadable."""
    out: list[list[tuple[int, int, int]]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"topic": topic, "key": key, "begin": begin, "end": end, "max": size}
        if cursor:
            params["cursor"] = cursor
        r = httpx.get(f"{base}/v1/messages", params=params, timeout=60)
        assert r.status_code == 200, r.text
        body = r.json()
        if all_readable:
            assert body["unreadable"] == []
        out.append([(m["partition"], m["offset"], m["timestamp"]) for m in body["messages"]])
        cursor = body["next_cursor"]
        if not cursor:
            return out
