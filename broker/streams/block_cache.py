"""Block cache: decoded data blocks of objects, LRU by payload bytes, between the log cache and the store.

Keyed by (object id, block position); a block is immutable once its object is committed, so entries
never go stale (a deleted object's blocks simply age out). Readers of cold partitions and repeated
lookups of one block (key lookups landing in the same block) read it from the store once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from broker.objects.format import StreamRecord

DEFAULT_BLOCK_CACHE_BYTES = 64 << 20


class BlockCache:
    def __init__(self, max_bytes: int = DEFAULT_BLOCK_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._blocks: OrderedDict[tuple[int, int], tuple[list[StreamRecord], int]] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    @property
    def size(self) -> int:
        return self._bytes

    def get(self, object_id: int, position: int) -> list[StreamRecord] | None:
        with self._lock:
            got = self._blocks.get((object_id, position))
            if got is None:
                self.misses += 1
                return None
            self._blocks.move_to_end((object_id, position))
            self.hits += 1
            return got[0]

    def contains(self, object_id: int, position: int) -> bool:
        """Whether the block is cached (not counted as a hit or a miss)."""
        with self._lock:
            return (object_id, position) in self._blocks

    def put(self, object_id: int, position: int, records: list[StreamRecord]) -> None:
        size = sum(len(r.payload) for r in records) + 64
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._blocks.pop((object_id, position), None)
            if old is not None:
                self._bytes -= old[1]
            self._blocks[(object_id, position)] = (records, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, s) = self._blocks.popitem(last=False)
                self._bytes -= s
