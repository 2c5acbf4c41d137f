"""Rolling upgrade under a producer, part 3 of `mqindex bench failover`.

Three nodes of the previous release (CHANGELOG.md's newest, built by bench/failover_release.py) on one
PostgreSQL schema, SeaweedFS and the shared WAL, a topic of PARTITIONS partitions, and one closed-loop producer
per partition (one message per request, explicit partition, following 421 to the leader; a refused connection,
a 503 or any other error answer is counted and the request sent again through a running node). Then each node
in turn is stopped with SIGTERM (a clean stop), started from the working tree with the same id, settings and
data directory, and waited for until `GET /v1/cluster/nodes` shows it alive and announcing its version.

Measured over the upgrade (from the first stop to the last node back): the producers' error answers by kind,
the longest gap between two acknowledgements of one partition (goal: < 2 s) and of the topic as a whole, the
acknowledgements per second, and the servers' CPU (every `mqindex serve` process, read from /proc) per 1,000
acknowledged messages with the rate the machine's cores allow at that cost (the ceiling).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import TreeCPU, percentile
from bench.serve_process import ServeProcess

GAP_GOAL_S = 2.0


class PartitionProducer(threading.Thread):
    """Produces to one partition until told to stop; keeps each acknowledgement's time (monotonic)."""

    def __init__(self, topic: str, partition: int, urls: list[str]) -> None:
        super().__init__(daemon=True)
        self.topic, self.partition, self.urls = topic, partition, urls  # urls: the running nodes (kept current)
        self.acks: list[float] = []
        self.errors: dict[str, int] = {}
        self.stop_flag = threading.Event()
        self.failure: str | None = None

    def _error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1

    def run(self) -> None:
        i = 0
        base = self.urls[self.partition % len(self.urls)]
        with httpx.Client(timeout=30) as http:
            while not self.stop_flag.is_set():
                body = {"messages": [{"key": f"k{self.partition}-{i % 100}", "value": f"v{i}",
                                      "partition": self.partition}]}
                try:
                    r = http.post(f"{base}/v1/topics/{self.topic}/messages", json=body)
                except httpx.TransportError:  # the node is stopping or stopped: through another one
                    self._error("connection")
                    base = self.urls[(i + self.partition) % len(self.urls)]
                    i += 1
                    time.sleep(0.02)
                    continue
                if r.status_code == 200:
                    self.acks.append(time.monotonic())
                    i += 1
                    continue
                if r.status_code == 421:  # not the leader: not an error answer, the route to follow
                    base = r.json().get("leader_url") or self.urls[0]
                    continue
                self._error(str(r.status_code))
                if r.status_code not in (503, 500, 502, 504):
                    self.failure = f"{r.status_code} {r.text[:200]}"
                    return
                base = self.urls[(i + self.partition) % len(self.urls)]
                i += 1
                time.sleep(0.02)


def _alive_with_version(via: str, node_id: int) -> bool:
    try:
        nodes = httpx.get(f"{via}/v1/cluster/nodes", timeout=5).json()["nodes"]
    except (httpx.HTTPError, ValueError, KeyError):
        return False
    return any(n["node_id"] == node_id and n["state"] == "alive" and n.get("version") for n in nodes)


def _wait(cond: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"rolling upgrade: {what} not within {timeout_s:.0f} s")
        time.sleep(0.05)


def _longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest time without an acknowledgement within [start, end] (its edges count as acknowledgements)."""
    inside = [start, *sorted(t for t in times if start < t < end), end]
    return max(b - a for a, b in zip(inside, inside[1:], strict=False))


def rolling_upgrade(old_mqindex: Path, old_version: str, work: Path, flags: list[str], partitions: int
                    ) -> dict[str, Any]:
    """Run the part; returns its figures (see the module doc). Every node it starts is stopped before it returns."""
    cpu = TreeCPU(lambda cmd: "servers" if " serve " in f" {cmd} " else "other")
    nodes: dict[int, ServeProcess] = {}
    producers: list[PartitionProducer] = []
    try:
        for i in range(3):
            nodes[i] = ServeProcess(work / f"node{i}", ["--node-id", str(i), *flags], work / f"node{i}.log",
                                    what=f"node {i} ({old_version})", mqindex=old_mqindex)
        httpx.post(f"{nodes[0].url}/v1/topics", json={"name": "upgrade", "partitions": partitions},
                   timeout=60).raise_for_status()
        urls = [n.url for n in nodes.values()]
        producers = [PartitionProducer("upgrade", p, urls) for p in range(partitions)]
        for pr in producers:
            pr.start()
        _wait(lambda: all(len(pr.acks) >= 20 or pr.failure for pr in producers), 120, "20 acks per partition")
        warm = {pr.partition: dict(pr.errors) for pr in producers}
        cpu0 = cpu.snapshot().get("servers", 0.0)
        acks0 = sum(len(pr.acks) for pr in producers)
        started = time.monotonic()
        steps = []
        for i in range(3):
            t0 = time.monotonic()
            urls[i] = urls[(i + 1) % 3]  # producers stop sending to the node being upgraded
            nodes[i].stop()
            stopped = time.monotonic()
            nodes[i] = ServeProcess(work / f"node{i}", ["--node-id", str(i), *flags], work / f"node{i}.log",
                                    what=f"node {i} (working tree)")
            _wait(lambda i=i: _alive_with_version(nodes[i].url, i), 120, f"node {i} alive, upgraded")
            urls[i] = nodes[i].url
            steps.append({"node": i, "stop_s": stopped - t0, "back_s": time.monotonic() - t0})
            print(f"[bench] rolling upgrade: node {i} stopped in {stopped - t0:.2f}s, back on the working tree "
                  f"after {time.monotonic() - t0:.2f}s", file=sys.stderr, flush=True)
            before = [len(pr.acks) for pr in producers]
            _wait(lambda b=before: all(len(pr.acks) >= n + 10 or pr.failure for pr, n in zip(producers, b,
                                                                                              strict=True)),
                  60, f"10 acks per partition after node {i}")
        ended = time.monotonic()
        cpu_s = cpu.snapshot().get("servers", 0.0) - cpu0
        acks = sum(len(pr.acks) for pr in producers) - acks0
    finally:
        for pr in producers:
            pr.stop_flag.set()
        for pr in producers:
            pr.join(60)
        for n in nodes.values():
            n.kill()
        cpu.stop()
    failures = [pr.failure for pr in producers if pr.failure]
    if failures:
        raise RuntimeError(f"rolling upgrade: a producer got an answer it cannot retry: {failures[0]}")
    errors: dict[str, int] = {}
    for pr in producers:
        for kind, n in pr.errors.items():
            n -= warm[pr.partition].get(kind, 0)
            if n:
                errors[kind] = errors.get(kind, 0) + n
    gaps = [_longest_gap(pr.acks, started, ended) for pr in producers]
    every = sorted(t for pr in producers for t in pr.acks)
    wall = ended - started
    cores = os.cpu_count() or 1
    per_1000 = 1e6 * cpu_s / max(acks, 1)  # CPU ms per 1,000 acknowledged messages
    return {"steps": steps, "errors": errors, "error_answers": sum(errors.values()),
            "partition_gap_max_s": max(gaps), "partition_gap_p50_s": percentile(gaps, 50),
            "topic_gap_s": _longest_gap(every, started, ended), "acks": acks, "seconds": wall,
            "acks_per_s": acks / wall, "server_cpu_s": cpu_s, "server_cpu_ms_per_1000": per_1000,
            "cores": cores, "ceiling_acks_per_s": cores * 1e6 / max(per_1000, 1e-9),
            "goal": "met" if max(gaps) < GAP_GOAL_S else "missed"}
