"""Load reports: each node's per-partition bytes in/out and request rates, in the metadata KV for the balancer.

Every `interval_s` a node reads the I/O counters of the streams it leads (StreamStorage.io: appends and bytes
appended, reads and bytes read, counted since the node opened) and stores their rates over the interval under
`load/<node id>`:

    {"node": 1, "at_ms": 1764201600000, "window_s": 10.0, "partitions": {"<topic id>/<partition>":
        [bytes_in_per_s, bytes_out_per_s, requests_per_s], ...}}

A partition that came here since the previous reading reports 0 for its first window (its rates start there).
The load of a partition is its bytes in and out per second plus REQUEST_BYTES per request (`score`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from broker.metadata import MetadataClient
from broker.partitions.partition_map import PartitionMap

log = logging.getLogger("mqindex.broker.cluster")

PREFIX = "load/"
REQUEST_BYTES = 1024  # what one request costs a node, counted as bytes moved


@dataclass(frozen=True)
class PartitionLoad:
    bytes_in: float
    bytes_out: float
    requests: float

    @property
    def score(self) -> float:
        return self.bytes_in + self.bytes_out + self.requests * REQUEST_BYTES


class LoadReporter:
    def __init__(self, parts: PartitionMap, meta: MetadataClient, node_id: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.parts = parts
        self.meta = meta
        self.node_id = node_id
        self.clock = clock
        self._last: tuple[float, dict[int, list[int]]] | None = None

    def read(self) -> dict[str, list[float]]:
        """Rates of the partitions led here since the previous reading (empty at the first)."""
        now = self.clock()
        io = self.parts.storage.io
        current = {}
        keys = {}
        for p in self.parts.owned():
            current[p.data_stream] = list(io.get(p.data_stream, (0, 0, 0, 0)))
            keys[p.data_stream] = f"{p.topic.topic_id}/{p.index}"
        last, self._last = self._last, (now, current)
        if last is None or now <= last[0]:
            return {}
        window = now - last[0]
        out = {}
        for sid, c in current.items():
            b = last[1].get(sid, c)
            out[keys[sid]] = [round((c[1] - b[1]) / window, 3), round((c[3] - b[3]) / window, 3),
                              round((c[0] - b[0] + c[2] - b[2]) / window, 3)]
        return out

    def report(self, wall_ms: int) -> None:
        rates = self.read()
        if self._last is None:
            return
        self.meta.kv_put(f"{PREFIX}{self.node_id}", json.dumps({"node": self.node_id, "at_ms": wall_ms,
                                                                "partitions": rates}))


def read_reports(meta: MetadataClient, alive: Iterable[int], now_ms: int,
                 max_age_ms: int) -> dict[int, dict[tuple[int, int], PartitionLoad]]:
    """Node -> (topic id, partition) -> load, from the reports of live nodes at most `max_age_ms` old."""
    live = set(alive)
    out: dict[int, dict[tuple[int, int], PartitionLoad]] = {}
    for key, value in meta.kv_items(PREFIX, refresh=False).items():
        try:
            doc = json.loads(value)
            node = int(key[len(PREFIX):])
        except ValueError:
            log.warning("unreadable load report", extra={"key": key})
            continue
        if node not in live or now_ms - int(doc.get("at_ms", 0)) > max_age_ms:
            continue
        loads = {}
        for tp, (bin_, bout, req) in doc.get("partitions", {}).items():
            tid, part = tp.split("/")
            loads[(int(tid), int(part))] = PartitionLoad(float(bin_), float(bout), float(req))
        out[node] = loads
    return out


def partition_scores(reports: dict[int, dict[tuple[int, int], PartitionLoad]]) -> dict[tuple[int, int], float]:
    """(topic id, partition) -> load score; a partition reported by two nodes (moved between their reports)
    counts at its higher score."""
    out: dict[tuple[int, int], float] = {}
    for loads in reports.values():
        for tp, load in loads.items():
            out[tp] = max(out.get(tp, 0.0), load.score)
    return out
