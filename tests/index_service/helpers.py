"""Shared pieces of the index service tests: an injectable millisecond clock, a service opener with
small files, and a reference model of the query contract."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from index_service import IndexHit, IndexService


class ManualClock:
    """A millisecond clock the test moves (the service reads it for begin times, rolls, retention)."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now = start_ms
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            return self.now

    def advance(self, ms: int) -> int:
        with self._lock:
            self.now += ms
            return self.now


def open_service(data_dir: Path, store: str | None, clock: ManualClock | None = None, **config: Any) -> IndexService:
    opts: dict[str, Any] = {"slots": 64, "max_items": 20, "maintain_interval_s": 0, "flush_interval_ms": 5}
    if clock is not None:
        opts["clock"] = clock
    opts.update(config)
    return IndexService.open(data_dir, store=store, **opts)


class Model:
    """What a query must answer: every stored (topic, queue, offset, size, time, keys) record."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, int, int], tuple[int, int, tuple[str, ...]]] = {}

    def add(self, topic: str, queue: int, offset: int, size: int, time_ms: int, keys: Iterable[str]) -> None:
        self.records[(topic, queue, offset)] = (size, time_ms, tuple(keys))

    def query(self, topic: str, key: str, max_count: int, begin_ms: int = 0,
              end_ms: int | None = None) -> list[tuple[int, int, int, int]]:
        hi = end_ms if end_ms is not None else (1 << 63) - 1
        out = [(t, off, q, size) for (tp, q, off), (size, t, keys) in self.records.items()
               if tp == topic and key in keys and begin_ms <= t <= hi]
        out.sort(reverse=True)
        return out[:max_count]


def as_tuples(hits: list[IndexHit]) -> list[tuple[int, int, int, int]]:
    return [(h.store_time_ms, h.offset, h.queue_id, h.size) for h in hits]
