"""Throughput history of this node: messages/s and bytes/s appended per topic over the last hour, in memory.

A ring of per-step buckets (STEP_S seconds, an hour of them), on a wall-clock grid (a bucket starts at a
multiple of the step since the epoch) so the buckets of every node line up and a cluster's figures add up.
Each reading takes the difference of the data streams' append counters (Stream.appended_offsets and
appended_bytes, counted since the stream opened here) since the previous reading and adds it to the bucket of
now; a background thread reads once per step, and `history()` reads too, so the current bucket is up to date.
A partition led here since the previous reading counts every append since it opened; one that moved away stops
counting. Nothing is stored: a restart starts an empty hour.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from broker.partitions.partition_map import PartitionMap
from broker.periodic import Periodic
from broker.streams import Stream

STEP_S = 10
SLOTS = 360  # an hour of 10 s buckets


class ThroughputHistory:
    """Per-topic appends of the partitions this node leads, bucketed by `step_s` over `slots` buckets."""

    def __init__(self, partitions: PartitionMap, step_s: int = STEP_S, slots: int = SLOTS,
                 clock: Callable[[], float] = time.time) -> None:
        self.partitions = partitions
        self.step_ms = step_s * 1000
        self.slots = slots
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, int], tuple[Stream, int, int]] = {}  # (topic, partition) -> stream, offsets, bytes
        self._buckets: dict[int, dict[str, list[int]]] = {}  # bucket start ms -> topic -> [messages, bytes]
        self._periodic = Periodic("throughput", step_s, self.read)

    def start(self) -> ThroughputHistory:
        self.read()
        self._periodic.start()
        return self

    def stop(self) -> None:
        self._periodic.stop()

    def read(self) -> None:
        """Add the appends since the previous reading to the bucket of now; drop buckets older than the ring."""
        now_ms = int(self._clock() * 1000)
        bucket_ms = now_ms - now_ms % self.step_ms
        with self._lock:
            seen: dict[tuple[str, int], tuple[Stream, int, int]] = {}
            bucket = self._buckets.setdefault(bucket_ms, {})
            for p in self.partitions.owned():
                s = p.data
                if s is None:
                    continue
                key = (p.topic.name, p.index)
                offsets, size = s.appended_offsets, s.appended_bytes
                before = self._seen.get(key)
                base = (before[1], before[2]) if before is not None and before[0] is s else (0, 0)
                seen[key] = (s, offsets, size)
                if offsets > base[0] or size > base[1]:
                    t = bucket.setdefault(key[0], [0, 0])
                    t[0] += offsets - base[0]
                    t[1] += size - base[1]
            self._seen = seen
            oldest = bucket_ms - (self.slots - 1) * self.step_ms
            for b in [b for b in self._buckets if b < oldest]:
                del self._buckets[b]

    def history(self) -> dict[str, Any]:
        """{start_ms, step_s, now_ms, topics: {topic: {messages_per_s: [...], bytes_per_s: [...], messages, bytes}},
        total: {...}}: `slots` buckets ending with the current one (its rate over the time it has run so far),
        oldest first; `messages` and `bytes` are the hour's counts."""
        self.read()
        now_ms = int(self._clock() * 1000)
        last = now_ms - now_ms % self.step_ms
        start = last - (self.slots - 1) * self.step_ms
        with self._lock:
            buckets = {b: {t: list(v) for t, v in topics.items()} for b, topics in self._buckets.items()
                       if start <= b <= last}
        topics: dict[str, dict[str, Any]] = {}
        total: dict[str, Any] = self._row()
        for b, per in buckets.items():
            i = (b - start) // self.step_ms
            seconds = self.step_ms / 1000 if b < last else max((now_ms - last) / 1000, 1.0)
            for topic, (messages, size) in per.items():
                for row in (topics.setdefault(topic, self._row()), total):
                    row["messages_per_s"][i] += messages / seconds
                    row["bytes_per_s"][i] += size / seconds
                    row["messages"] += messages
                    row["bytes"] += size
        return {"start_ms": start, "step_s": self.step_ms // 1000, "now_ms": now_ms, "topics": topics,
                "total": total}

    def _row(self) -> dict[str, Any]:
        return {"messages_per_s": [0.0] * self.slots, "bytes_per_s": [0.0] * self.slots, "messages": 0, "bytes": 0}
