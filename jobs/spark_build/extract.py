"""Step 2 (Spark job 1, executors): object parts read and decoded into item rows grouped by time window;
the parts cut and packed into tasks of about equal offsets."""

from __future__ import annotations

import dataclasses
import gc
import heapq
import math
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from broker.partitions.batch_columns import object_columns
from jobs import index_items
from jobs.spark_build.options import DEFAULT_PART_BYTES, PartTask
from storage_tier import BlobStore, open_store

# -- executor side ---------------------------------------------------------------------------------
_STORES: dict[str, BlobStore] = {}
_STORES_LOCK = threading.Lock()


def _store(url: str) -> BlobStore:
    """One store per URL per Python worker (workers are reused across tasks)."""
    with _STORES_LOCK:
        s = _STORES.get(url)
        if s is None:
            s = _STORES[url] = open_store(url)
        return s


def settle_worker_heap() -> None:
    """Executor, at the end of a task: collect, then freeze what survives (imported modules, the cached
    store clients). PySpark's daemon runs a full gc.collect() after every task of a reused Python worker,
    and a full collection walks every object the worker holds: with boto3's service models loaded about
    120,000, 0.5 s per collection measured on the bench machine, a cost paid again by every task. Frozen
    objects are skipped by later collections; objects created after the freeze are collected as usual."""
    gc.collect()
    gc.freeze()


@dataclass(frozen=True)
class ExecutorParams:
    """What every executor task needs (small; shipped in the task closure)."""

    store_url: str
    index_store_url: str
    topic: str
    name: str
    attempt: str
    kinds: tuple[str, ...]
    from_ms: int
    to_ms: int
    window_ms: int
    max_items: int
    slots: int
    part_bytes: int = DEFAULT_PART_BYTES
    fault_window: int | None = None


def extract_parts(params: ExecutorParams, tasks: Iterable[PartTask],
                  counters: tuple[Any, Any, Any] | None = None) -> Iterator[tuple[int, np.ndarray]]:
    """Executor: (window, item rows) of the records in the given object parts (jobs/index_items.py), decoded
    a column at a time (broker/partitions/batch_columns.py): no Python object per record or entry."""
    store = _store(params.store_url)
    for t in tasks:
        cols = object_columns(store, t.key, t.size or None, t.stream_id, t.start, t.end, params.kinds,
                              params.from_ms, params.to_ms)
        if counters is not None:
            counters[0].add(cols.records)
            counters[1].add(cols.bytes_read)
            counters[2].add(1)
        items = index_items.column_items(params.topic, t.partition, cols.offset, cols.time, cols.size, cols.counts,
                                         cols.keys)
        yield from index_items.by_window(items, params.window_ms)
    settle_worker_heap()


def split_parts(tasks: list[PartTask], pieces: int) -> list[PartTask]:
    """The parts with every part longer than total offsets / `pieces` cut into equal offset ranges of about
    that length, so that one large object part does not keep one executor busy while the others idle. A
    piece reads the blocks overlapping its range (a stream record across a cut is read by both pieces,
    each keeping its own offsets)."""
    total = sum(t.end - t.start for t in tasks)
    target = max(1, math.ceil(total / max(1, pieces)))
    out: list[PartTask] = []
    for t in tasks:
        n = max(1, round((t.end - t.start) / target))
        bounds = [t.start + (t.end - t.start) * i // n for i in range(n + 1)]
        out += [dataclasses.replace(t, start=a, end=b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    return out


def balanced_slices(tasks: list[PartTask], slices: int) -> list[list[PartTask]]:
    """The parts packed into at most `slices` groups of about equal offsets (largest part first into the
    least loaded group), largest group first: Spark starts its tasks in that order, so the long ones do
    not come last."""
    groups: list[list[PartTask]] = [[] for _ in range(max(1, min(slices, len(tasks))))]
    load = [(0, i) for i in range(len(groups))]
    for t in sorted(tasks, key=lambda t: t.end - t.start, reverse=True):
        total, i = heapq.heappop(load)
        groups[i].append(t)
        heapq.heappush(load, (total + t.end - t.start, i))
    return sorted((g for g in groups if g), key=lambda g: sum(t.end - t.start for t in g), reverse=True)
