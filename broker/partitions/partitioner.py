"""Choosing a partition for a produced message the way Kafka's default partitioner does.

An explicit partition wins; a keyed message goes to `toPositive(murmur2(key)) % partitions` (the same
partition a Java Kafka producer picks for that key); a message without key goes round robin.
"""

from __future__ import annotations

import itertools
import threading

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2) as a signed 32-bit int."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length % 4
    tail = data[4 * n4:]
    if rest == 3:
        h ^= tail[2] << 16
    if rest >= 2:
        h ^= tail[1] << 8
    if rest >= 1:
        h ^= tail[0]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class RoundRobin:
    """A thread-safe counter per topic for messages without key or partition."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, itertools.count[int]] = {}

    def next(self, topic: str, partitions: int) -> int:
        with self._lock:
            c = self._counters.setdefault(topic, itertools.count())
            return next(c) % partitions

    def take(self, topic: str, n: int) -> int:
        """The first of n consecutive counters of `topic`, taken at once (the caller takes each modulo the
        partitions): the messages of one request go round robin without others' in between."""
        with self._lock:
            c = self._counters.setdefault(topic, itertools.count())
            first = next(c)
            self._counters[topic] = itertools.count(first + n)
            return first
