"""Spark batch builder: compacted native index files built from the broker's objects, served as UPLOADED.

Driver (`run_build`):
1. `plan_build` (no Spark yet): checks the arguments, reads the controller metadata (topic ->
   partitions -> data streams -> the committed objects holding them, see broker/partitions/object_listing.py),
   prunes objects committed before the window, and fails with `BuildError` on an unknown topic or
   partition, a window whose start is after its end, or a window no object can hold records of.
2. Extract (Spark job 1): the object parts, large ones cut into offset ranges (`split_parts`), are packed
   into Spark tasks of about equal offsets, largest first (`balanced_slices`). Executors read each piece
   through storage_tier (ranged GETs of the blocks) and decode its Kafka record batches a column at a time
   with aiokafka's C reader (broker/partitions/batch_columns.py): for each record stored in [from, to)
   with at least one selected key, the entry the broker's dispatcher indexes online (partition, offset,
   size, store time, keys) becomes numpy item rows (one per key, the key's fingerprint computed here;
   jobs/index_items.py) grouped by time window (`window_ms`, aligned to the epoch; by default the online
   files' roll age). Entries cross the stages as these arrays, never as per-entry Python objects. The
   result stays in Spark (persisted); the driver collects only a histogram of items per 10 ms of store time.
3. Plan the files: each window is cut into as many time-contiguous ranges as its items need files of
   at most `max_items` items (the online files' size), of about equal size; the number of ranges is
   the progress total.
4. Build (Spark job 2, one task per file range, so one busy hour still spreads over the executors):
   sort the item rows by store time (numpy), write them with NativeIndexWriter.put_items, seal, compact,
   upload to the index store under `index-builds/<name>/<attempt>/` (verified by size and CRC32C read
   back) and return the file's manifest.
5. Register: one atomic build document in the index directory (index_service/external_builds.py); a
   service adopts it on open or on its next maintenance cycle, all files in one step, replacing any
   earlier attempt of the same build. When no service holds the directory, the driver opens one briefly
   so the build is adopted before it returns.

Build name = hash of (index directory, topic, partitions, window, key kinds, window size, file size): the
same build run twice replaces the first run's files. A failed run cancels its Spark jobs, deletes every object its
attempt uploaded and registers nothing; objects left by a driver that died are deleted by the next run
of the same build (a per-build lock in the index directory keeps two runs of one build apart).

Executor functions import only storage_tier, index_file and the broker's object/record codecs. The session
is made by jobs/spark_session.py (spark.pyspark.python reaches the executors; Spark's console progress bar
off); with `ship_code` the project's packages go to the executors as a zip (jobs/code_zip.py).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as dt
import fcntl
import gc
import hashlib
import heapq
import itertools
import json
import logging
import math
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import crc32c
import numpy as np

from broker.partitions.batch_columns import object_columns
from broker.partitions.record_entries import ALL_KINDS, parse_kinds
from index_file import NativeIndexWriter, compact
from index_file.native_compacted import HEADER_SIZE, CompactedHeader
from jobs import index_items
from jobs.code_zip import ship_code, write_code_zip
from jobs.spark_session import describe_session, session_setup, spark_session
from storage_tier import BlobStore, open_store

log = logging.getLogger("mqindex.index_service.spark_build")

HOUR_MS = 3_600_000
DEFAULT_NAMESPACE = "_kafka_mqindex"
DEFAULT_MAX_ITEMS = 1_000_000  # ServiceConfig.max_items: the online files' size
DEFAULT_SLOTS = 262_144  # ServiceConfig.slots
DEFAULT_PART_BYTES = 16 * 1024 * 1024  # ServiceConfig.upload_part_bytes
BUILD_PREFIX = "index-builds/"  # = external_builds.BUILD_PREFIX (executors do not import index_service)

Entry = tuple[int, int, int, int, list[str]]  # partition, offset, size, store_time_ms, keys


def build_stem(begin_ms: int, name: str, attempt: str, seq: int) -> str:
    """A build file's stem; index_service.external_builds.parse_build_stem reads it back."""
    return f"b{begin_ms:016d}-{name}-{attempt}-{seq:04d}"


def build_key(name: str, attempt: str, stem: str) -> str:
    """The index-store key of one build file (external_builds.build_key)."""
    return f"{BUILD_PREFIX}{name}/{attempt}/{stem}.mqxc"


class BuildError(ValueError):
    """Bad arguments or nothing to build: raised before any Spark work starts."""


class BuildFailed(RuntimeError):
    """The Spark work failed; the attempt's objects were deleted and nothing was registered."""


# -- options, plan, summary --------------------------------------------------------------------------
@dataclass
class BuildOptions:
    metadata_url: str
    store_url: str  # the broker's object store (where its stream objects are)
    index_dir: str  # the index service directory the build is registered in
    topic: str
    partitions: list[int] | None = None  # None: every partition
    from_ms: int | None = None  # inclusive; None: from the beginning
    to_ms: int | None = None  # exclusive; None: everything committed
    kinds: tuple[str, ...] = ALL_KINDS
    master: str = "local[*]"
    index_store_url: str | None = None  # where index files go (default: store_url, as the broker's index)
    namespace: str = DEFAULT_NAMESPACE
    window_ms: int = HOUR_MS
    max_items: int = DEFAULT_MAX_ITEMS
    slots: int = DEFAULT_SLOTS
    spark_conf: dict[str, str] = field(default_factory=dict)
    progress_interval_s: float = 2.0
    wait_served_s: float = 30.0  # a running service adopts the build on its next cycle; wait this long
    ship_code: bool = False  # ship the project's packages as a zip (workers without mqindex installed)
    #: test hook: "build:N" makes the executor building file range N (0-based) fail after uploading a file
    fault: str | None = None

    @property
    def index_store(self) -> str:
        return self.index_store_url or self.store_url


@dataclass(frozen=True)
class PartTask:
    """One object part an executor reads: offsets [start, end) of stream `stream_id` in object `key`."""

    partition: int
    stream_id: int
    key: str
    size: int
    start: int
    end: int


@dataclass
class BuildPlan:
    name: str
    attempt: str
    topic: str
    topic_id: int
    partitions: list[int]
    from_ms: int
    to_ms: int
    kinds: tuple[str, ...]
    tasks: list[PartTask]
    objects: int  # distinct objects read
    offsets: int  # offsets covered by the tasks (records, before time filtering)
    pruned: int  # objects skipped by commit time
    uncommitted_note: str = ""

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "attempt": self.attempt, "topic": self.topic, "partitions": self.partitions,
                "from_ms": self.from_ms, "to_ms": self.to_ms, "kinds": list(self.kinds), "objects": self.objects,
                "parts": len(self.tasks), "offsets": self.offsets, "pruned_objects": self.pruned}


@dataclass
class BuildSummary:
    name: str
    attempt: str
    files: int = 0
    items: int = 0
    records_read: int = 0  # records decoded from the objects
    records_indexed: int = 0  # records in the window with keys
    bytes_read: int = 0
    bytes_uploaded: int = 0
    windows: int = 0
    seconds: float = 0.0
    extract_seconds: float = 0.0
    build_seconds: float = 0.0
    served: bool = False  # adopted by a service (this process's, or a running one's)
    replaced_files: int = 0
    manifests: list[dict[str, Any]] = field(default_factory=list)

    @property
    def records_per_s(self) -> float:
        return self.records_read / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("manifests")
        d["records_per_s"] = round(self.records_per_s, 1)
        d["files_list"] = [{"stem": m["stem"], "items": m["items"], "min_ms": m["min_ms"], "max_ms": m["max_ms"],
                            "key": m["key"], "size": m["size"]} for m in self.manifests]
        return d


def parse_time(value: str | int | None, what: str) -> int | None:
    """Milliseconds since the epoch, or an ISO 8601 date/time (UTC when no offset is given)."""
    if value is None or value == "":
        return None
    if isinstance(value, int):
        return value
    s = value.strip()
    if s.lstrip("-").isdigit():
        return int(s)
    try:
        t = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise BuildError(f"{what} {value!r} is neither milliseconds since the epoch nor an ISO 8601 time") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000)


def build_name(index_dir: str, topic: str, topic_id: int, partitions: list[int], from_ms: int | None,
               to_ms: int | None, kinds: tuple[str, ...], window_ms: int, max_items: int) -> str:
    """The build's identity: the same build into the same index directory has the same name (and
    replaces the earlier run); two index directories sharing one store never share a name."""
    ident = json.dumps({"index_dir": str(Path(index_dir).resolve()), "topic": topic, "topic_id": topic_id,
                        "partitions": sorted(partitions), "from": from_ms, "to": to_ms, "kinds": list(kinds),
                        "window_ms": window_ms, "max_items": max_items}, sort_keys=True)
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def _check_options(opts: BuildOptions) -> None:
    if not opts.topic:
        raise BuildError("--topic is required")
    if opts.from_ms is not None and opts.to_ms is not None:
        if opts.from_ms > opts.to_ms:
            raise BuildError(f"--from ({opts.from_ms}) is after --to ({opts.to_ms})")
        if opts.from_ms == opts.to_ms:
            raise BuildError(f"empty window: --from and --to are both {opts.from_ms} (the window is [from, to))")
    if opts.window_ms <= 0 or opts.max_items <= 0 or opts.slots <= 0:
        raise BuildError("window, max items and slots must be positive")
    if opts.partitions is not None:
        if not opts.partitions:
            raise BuildError("--partitions names no partition")
        if len(set(opts.partitions)) != len(opts.partitions):
            raise BuildError(f"--partitions repeats a partition: {opts.partitions}")
    if opts.fault is not None and not opts.fault.startswith("build:"):
        raise BuildError(f"unknown fault {opts.fault!r}")
    try:
        parse_kinds(opts.kinds)
    except ValueError as exc:
        raise BuildError(f"--keys: {exc}") from None


def plan_build(opts: BuildOptions) -> BuildPlan:
    """Everything the driver knows before Spark starts; BuildError for bad arguments or an empty window."""
    from broker.metadata import MetadataClient
    from broker.partitions.object_listing import list_partition_objects
    from broker.partitions.topics import TopicRegistry

    _check_options(opts)
    kinds = parse_kinds(opts.kinds)
    try:
        meta = MetadataClient(opts.metadata_url, node_id=-1, namespace=opts.namespace)
    except Exception as exc:  # noqa: BLE001 - any connection error is an argument error here
        raise BuildError(f"cannot read the controller metadata at {opts.metadata_url}: {exc}") from None
    try:
        reg = TopicRegistry(meta)
        info = reg.get(opts.topic)
        if info is None:
            known = reg.names()
            raise BuildError(f"unknown topic {opts.topic!r} (topics in the metadata: "
                             f"{', '.join(known) if known else 'none'})")
        parts = sorted(opts.partitions) if opts.partitions is not None else list(range(info.partitions))
        bad = [p for p in parts if not 0 <= p < info.partitions]
        if bad:
            raise BuildError(f"topic {info.name!r} has partitions 0..{info.partitions - 1}; no partition {bad}")
        tasks: list[PartTask] = []
        pruned = 0
        objects: set[int] = set()
        uncommitted = 0
        for p in parts:
            listing = list_partition_objects(meta, info, p, opts.from_ms)
            pruned += listing.pruned
            for part in listing.parts:
                if part.end <= part.start:
                    continue
                objects.add(part.object_id)
                tasks.append(PartTask(p, part.stream_id, part.key, part.size, part.start, part.end))
            covered = sum(t.end - t.start for t in tasks if t.partition == p)
            uncommitted += max(0, listing.end_offset - listing.start_offset - covered) if not listing.pruned else 0
        if not tasks:
            window = f"[{opts.from_ms if opts.from_ms is not None else 'beginning'}, " \
                     f"{opts.to_ms if opts.to_ms is not None else 'now'})"
            raise BuildError(f"empty window: no committed object of topic {info.name!r} partitions {parts} can hold "
                             f"records stored in {window}")
        name = build_name(opts.index_dir, info.name, info.topic_id, parts, opts.from_ms, opts.to_ms, kinds,
                          opts.window_ms, opts.max_items)
        return BuildPlan(name=name, attempt=uuid.uuid4().hex[:12], topic=info.name, topic_id=info.topic_id,
                         partitions=parts, from_ms=opts.from_ms if opts.from_ms is not None else 0,
                         to_ms=opts.to_ms if opts.to_ms is not None else 1 << 62, kinds=kinds, tasks=tasks,
                         objects=len(objects), offsets=sum(t.end - t.start for t in tasks), pruned=pruned,
                         uncommitted_note=f"{uncommitted} offsets not in objects" if uncommitted else "")
    finally:
        meta.close()


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


def _as_items(entries: list[Entry] | np.ndarray) -> np.ndarray:
    """Item rows of (partition, offset, size, store time, keys) entries (fingerprints left 0: for counting and
    cutting only); item rows are returned as they are."""
    if isinstance(entries, np.ndarray):
        return entries
    out = np.zeros(sum(len(e[4]) for e in entries), dtype=index_items.ITEM_ROW)
    counts = [len(e[4]) for e in entries]
    for field_name, i in (("partition", 0), ("offset", 1), ("size", 2), ("time", 3)):
        out[field_name] = np.repeat(np.array([e[i] for e in entries], dtype=np.int64), counts)
    return out


BUCKET_MS = 10  # resolution of the store-time histogram files are cut by


def bucket_counts(items: Iterable[tuple[int, list[Entry] | np.ndarray]]
                  ) -> Iterator[tuple[tuple[int, int], tuple[int, int]]]:
    """Executor: ((window, store time // BUCKET_MS), (records, items)) summed over one Spark partition."""
    acc: dict[tuple[int, int], tuple[int, int]] = {}
    for w, entries in items:
        for b, records, n in index_items.histogram(_as_items(entries), BUCKET_MS):
            c = acc.get((w, b), (0, 0))
            acc[(w, b)] = (c[0] + records, c[1] + n)
    yield from acc.items()


def add_counts(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return a[0] + b[0], a[1] + b[1]


def plan_files(buckets: dict[tuple[int, int], tuple[int, int]], max_items: int, window_ms: int) -> list[int]:
    """Start times of the file ranges: each window is cut, at histogram bucket boundaries, into as many
    time-contiguous ranges as its items need files (ceil(items / max_items)), of about equal size; a
    range never spans two windows. Ranges are built by separate Spark tasks; a range that exceeds
    max_items by a bucket's worth is cut once more by its task (file_chunks)."""
    starts: list[int] = []
    by_window: dict[int, list[tuple[int, int]]] = {}
    for (w, b), (_r, n) in buckets.items():
        by_window.setdefault(w, []).append((b, n))
    for w in sorted(by_window):
        bs = sorted(by_window[w])
        total = sum(n for _b, n in bs)
        n_files = math.ceil(total / max_items)
        cum = 0
        last = -1
        for b, n in bs:  # a bucket goes to the range its middle item falls in
            r = min(n_files - 1, (2 * cum + n) * n_files // (2 * total))
            if r != last:
                starts.append(max(b * BUCKET_MS, w * window_ms))
                last = r
            cum += n
    return starts


def assign_ranges(starts: list[int]) -> Callable[[Iterable[tuple[int, Any]]], Iterator[tuple[int, Any]]]:
    """Executor: re-key entries from windows to file ranges (index of the range holding the store time);
    item rows stay arrays (one per range and Spark partition), entry lists stay lists."""

    def run(items: Iterable[tuple[int, Any]]) -> Iterator[tuple[int, Any]]:
        arrays: dict[int, list[np.ndarray]] = {}
        lists: dict[int, list[Entry]] = {}
        for _w, entries in items:
            if isinstance(entries, np.ndarray):
                for r, part in index_items.group_by(entries, index_items.range_index(entries["time"], starts)):
                    arrays.setdefault(r, []).append(part)
            else:
                ranges = index_items.range_index(np.array([e[3] for e in entries], dtype=np.int64), starts)
                for r, e in zip(ranges.tolist(), entries, strict=True):
                    lists.setdefault(r, []).append(e)
        for r, parts in arrays.items():
            yield r, parts[0] if len(parts) == 1 else np.concatenate(parts)
        yield from lists.items()

    return run


def file_chunks(entries: list[Entry], max_items: int) -> list[list[Entry]]:
    """Cut time-sorted entries into files of at most max_items items (keys), balanced: as many files as
    the items need, each filled to about the same size (index_items.file_cuts)."""
    try:
        cuts = index_items.file_cuts(np.array([len(e[4]) for e in entries], dtype=np.int64), max_items)
    except ValueError:
        e = next(e for e in entries if len(e[4]) > max_items)
        raise ValueError(f"record {e[0]}@{e[1]} has {len(e[4])} keys, more than a file holds ({max_items})") \
            from None
    return [entries[a:b] for a, b in zip(cuts, [*cuts[1:], len(entries)], strict=True) if b > a]


def _manifest(path: Path, key: str, stem: str, crc: int, size: int, items: int, begin_ms: int) -> dict[str, Any]:
    """The UPLOADED manifest of a compacted file (the same fields lifecycle.upload writes)."""
    with open(path, "rb") as f:
        head = f.read(HEADER_SIZE)
        header = CompactedHeader.parse(str(path), head)
        f.seek(header.summary_offset)
        tail = f.read()
    return {"stem": stem, "key": key, "size": size, "crc32c": crc, "begin_ms": begin_ms,
            "min_ms": header.min_ms, "max_ms": header.max_ms, "items": items,
            "format": "native-compacted", "head": base64.b64encode(head).decode(),
            "tail_offset": header.summary_offset, "tail": base64.b64encode(tail).decode(), "sort_tag": stem}


def abort_marker(name: str, attempt: str) -> str:
    """Written by a driver whose build failed, before it deletes the attempt's objects; an executor that
    finds it after an upload deletes what it uploaded, so no object outlives a failed attempt."""
    return f"{BUILD_PREFIX}{name}/{attempt}/ABORTED"


class AttemptAborted(RuntimeError):
    pass


def _upload(store: BlobStore, path: Path, key: str, part: int, marker: str) -> tuple[int, int]:
    """Put (multipart above `part` bytes), verify size and CRC32C read back; returns (size, crc).
    If the driver aborted the attempt meanwhile (marker present), delete the object and stop."""
    if store.exists(marker):
        raise AttemptAborted(f"build attempt aborted; {key} not uploaded")
    size = path.stat().st_size
    crc = 0
    with open(path, "rb") as f:
        if size <= part:
            data = f.read()
            crc = crc32c.crc32c(data)
            store.put(key, data)
        else:
            w = store.multipart(key)
            try:
                while data := f.read(part):
                    crc = crc32c.crc32c(data, crc)
                    w.write_part(data)
                w.complete()
            except BaseException:
                w.abort()
                raise
    if store.exists(marker):  # the driver may have listed the attempt before this put: clean up ourselves
        store.delete(key)
        raise AttemptAborted(f"build attempt aborted; {key} deleted")
    remote = store.size(key)
    if remote != size:
        raise OSError(f"{key}: stored {remote} bytes, built {size}")
    got = 0
    for start in range(0, size, part):
        got = crc32c.crc32c(store.get(key, start, min(size, start + part)), got)
    if got != crc:
        raise OSError(f"{key}: CRC32C {got:#x} read back, built {crc:#x}")
    return size, crc


def build_window_files(params: ExecutorParams, window_index: int, items: np.ndarray,
                       on_file: Callable[[], None] | None = None) -> list[dict[str, Any]]:
    """Executor: write, seal, compact and upload the files of one file range; returns their manifests."""
    rows = index_items.sort_dedup(items)
    firsts = np.flatnonzero(index_items.record_starts(rows))
    counts = np.diff(np.append(firsts, len(rows)))
    try:
        cuts = index_items.file_cuts(counts, params.max_items)
    except ValueError:
        i = int(firsts[int(np.argmax(counts > params.max_items))])
        raise ValueError(f"record {int(rows['partition'][i])}@{int(rows['offset'][i])} has more keys than a file "
                         f"holds ({params.max_items})") from None
    bounds = [int(firsts[c]) for c in cuts] + [len(rows)]
    store = _store(params.index_store_url)
    out: list[dict[str, Any]] = []
    for seq, (lo, hi) in enumerate(zip(bounds, bounds[1:], strict=False)):
        if hi <= lo:
            continue
        chunk = index_items.native_items(rows[lo:hi])
        begin = int(chunk["time"][0])
        stem = build_stem(begin, params.name, params.attempt, seq)
        key = build_key(params.name, params.attempt, stem)
        tmp = Path(tempfile.mkdtemp(prefix="mqindex-spark-"))
        try:
            n_items = len(chunk)
            src, dst = tmp / f"{stem}.mqxu", tmp / f"{stem}.mqxc"
            w = NativeIndexWriter.create(src, begin, params.slots, n_items)
            try:
                done = w.put_items(chunk)
                if done != n_items:
                    raise RuntimeError(f"{stem}: {done} of {n_items} items fit in a file of {n_items} items")
                w.seal()
            finally:
                w.close()
            stats = compact(src, dst)
            src.unlink()
            size, crc = _upload(store, dst, key, params.part_bytes, abort_marker(params.name, params.attempt))
            out.append(_manifest(dst, key, stem, crc, size, stats.items, begin))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if on_file is not None:
            on_file()
        if params.fault_window == window_index:
            raise RuntimeError(f"injected executor fault after uploading {key}")
    return out


# -- driver ----------------------------------------------------------------------------------------
class _Progress:
    """A driver thread printing progress lines from the Spark accumulators."""

    def __init__(self, out: TextIO, interval: float) -> None:
        self.out = out
        self.interval = interval
        self.phase = "plan"
        self.started = time.perf_counter()
        self.records: Any = None
        self.objects: Any = None
        self.files: Any = None
        self.total_parts = 0
        self.total_files = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="spark-build-progress", daemon=True)

    def line(self) -> str:
        el = max(time.perf_counter() - self.started, 1e-9)
        recs = self.records.value if self.records is not None else 0
        parts = self.objects.value if self.objects is not None else 0
        files = self.files.value if self.files is not None else 0
        if self.phase == "extract":
            return (f"[spark-build] extract: object parts {parts}/{self.total_parts}, records {recs:,} "
                    f"({recs / el:,.0f} records/s)")
        return (f"[spark-build] build: files {files}/{self.total_files} done, records {recs:,} "
                f"({recs / el:,.0f} records/s overall)")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            print(self.line(), file=self.out, flush=True)

    def start(self) -> None:
        if self.interval > 0:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


@contextlib.contextmanager
def _build_lock(index_dir: Path, name: str) -> Iterator[None]:
    d = index_dir / "builds"
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / f".{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BuildError(f"build {name} is already running against {index_dir}") from None
        yield
    finally:
        os.close(fd)


def _attempt_prefix(name: str, attempt: str) -> str:
    return f"{BUILD_PREFIX}{name}/{attempt}/"


def delete_attempt(store: BlobStore, name: str, attempt: str) -> int:
    keys = store.list(_attempt_prefix(name, attempt))
    if keys:
        store.delete(keys)
    return len(keys)


def clean_leftovers(store: BlobStore, index_dir: Path, name: str) -> int:
    """Delete objects of earlier attempts of this build that no service serves or will serve."""
    from index_service.external_builds import registered_attempts

    keep = registered_attempts(index_dir, name)
    prefix = f"{BUILD_PREFIX}{name}/"
    doomed = [k for k in store.list(prefix) if k[len(prefix):].split("/", 1)[0] not in keep]
    if doomed:
        store.delete(doomed)
        log.warning("deleted objects of an earlier failed attempt", extra={"build": name, "objects": len(doomed)})
    return len(doomed)


def _wait_tasks_gone(sc: Any, timeout: float = 120.0) -> bool:
    """Wait until Spark reports no active job, stage or task (killed tasks end asynchronously)."""
    deadline = time.monotonic() + timeout
    tracker = sc.statusTracker()
    while time.monotonic() < deadline:
        stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
        if not tracker.getActiveJobsIds() and not any(st is not None and st.numActiveTasks for st in stages):
            return True
        time.sleep(0.1)
    return False


def abort_attempt(sc: Any, store: BlobStore, name: str, attempt: str) -> int:
    """After a failure: mark the attempt aborted, cancel its jobs, delete every object it uploaded; once
    no task runs any more, delete the marker too. Returns how many objects were deleted."""
    marker = abort_marker(name, attempt)
    store.put(marker, b"aborted")
    with contextlib.suppress(Exception):
        sc.cancelAllJobs()
    deleted = 0
    keys = [k for k in store.list(_attempt_prefix(name, attempt)) if k != marker]
    if keys:
        store.delete(keys)
        deleted += len(keys)
    quiet = False
    with contextlib.suppress(Exception):
        quiet = _wait_tasks_gone(sc)
    # Spark may report a killed task gone while its Python worker still finishes an upload (the worker deletes
    # what it put once it sees the marker): watch the attempt's prefix until it has stayed empty for a while
    settle_s, empty_since, deadline = 3.0, None, time.monotonic() + 60
    while time.monotonic() < deadline:
        keys = [k for k in store.list(_attempt_prefix(name, attempt)) if k != marker]
        if keys:  # uploaded after the first listing by a task that had not seen the marker yet
            store.delete(keys)
            deleted += len(keys)
            empty_since = None
        elif empty_since is None:
            empty_since = time.monotonic()
        elif time.monotonic() - empty_since >= settle_s:
            break
        time.sleep(0.2)
    if quiet:
        store.delete(marker)
    else:
        log.warning("tasks of a failed build still running; its abort marker stays until the next run of the "
                    "build deletes it", extra={"build": name, "attempt": attempt})
    return deleted


def _serve(opts: BuildOptions, plan: BuildPlan, summary: BuildSummary, out: TextIO) -> None:
    """Make the registered build served: adopt it here when no service holds the directory, else wait
    for the running service's next maintenance cycle."""
    from index_service import IndexService
    from index_service.external_builds import pending_builds

    try:
        svc = IndexService.open(opts.index_dir, store=opts.index_store, maintain_interval_s=0)
    except RuntimeError as exc:
        if "in use" not in str(exc):
            raise
        print(f"[spark-build] {opts.index_dir} is held by a running service; it serves the build after its next "
              f"maintenance cycle", file=out, flush=True)
        deadline = time.monotonic() + opts.wait_served_s
        while time.monotonic() < deadline:
            if plan.name not in pending_builds(opts.index_dir):
                summary.served = True
                return
            time.sleep(0.2)
        return
    try:
        adopted = svc.adopted
        summary.served = plan.name in adopted.builds
        summary.replaced_files = adopted.files_replaced
        if adopted.failed:
            raise BuildFailed(f"the index service could not adopt build(s) {adopted.failed}; see its log")
    finally:
        svc.close()


def run_build(opts: BuildOptions, spark: Any = None, out: TextIO | None = None,
              plan: BuildPlan | None = None) -> BuildSummary:
    """Plan (raises BuildError before Spark starts), build with Spark, upload, register, serve."""
    from index_service.external_builds import register_build

    out = out if out is not None else sys.stderr
    plan = plan or plan_build(opts)
    index_dir = Path(opts.index_dir).resolve()
    try:
        index_store = open_store(opts.index_store)
        open_store(opts.store_url).close()
    except Exception as exc:  # noqa: BLE001
        raise BuildError(f"cannot open the object store: {exc}") from None
    summary = BuildSummary(plan.name, plan.attempt)
    started = time.perf_counter()
    print(f"[spark-build] build {plan.name} attempt {plan.attempt}: topic {plan.topic!r} partitions "
          f"{plan.partitions}, {plan.objects} objects ({len(plan.tasks)} parts, {plan.offsets:,} offsets, "
          f"{plan.pruned} pruned by time){'; ' + plan.uncommitted_note if plan.uncommitted_note else ''}",
          file=out, flush=True)
    with _build_lock(index_dir, plan.name):
        clean_leftovers(index_store, index_dir, plan.name)
        own_session = False
        if spark is None:
            from pyspark.sql import SparkSession

            own_session = SparkSession.getActiveSession() is None  # an embedding app keeps its session
            setup = session_setup(opts.master, opts.spark_conf, ships_code=opts.ship_code)
            for note in setup.notes:
                print(f"[spark-build] note: {note}", file=out, flush=True)
            spark = spark_session(opts.master, setup)
        sc = spark.sparkContext
        if opts.ship_code:
            code = write_code_zip()
            ship_code(sc, code)
            print(f"[spark-build] shipping the project's packages to the executors as {code}", file=out, flush=True)
        print(f"[spark-build] {describe_session(sc)}", file=out, flush=True)
        fault_window = int(opts.fault.split(":", 1)[1]) if opts.fault else None
        params = ExecutorParams(opts.store_url, opts.index_store, plan.topic, plan.name, plan.attempt, plan.kinds,
                                plan.from_ms, plan.to_ms, opts.window_ms, opts.max_items, opts.slots,
                                fault_window=fault_window)
        progress = _Progress(out, opts.progress_interval_s)
        records_acc, bytes_acc, parts_acc, files_acc = (sc.accumulator(0) for _ in range(4))
        progress.records, progress.objects, progress.files = records_acc, parts_acc, files_acc
        # pieces of at most about total / (4 x cores) offsets, packed into 4 tasks per core of equal offsets
        pieces = split_parts(plan.tasks, sc.defaultParallelism * 4)
        progress.total_parts = len(pieces)
        extracted = None
        try:
            progress.start()
            progress.phase = "extract"
            t0 = time.perf_counter()
            groups = balanced_slices(pieces, sc.defaultParallelism * 4)
            counters = (records_acc, bytes_acc, parts_acc)
            extracted = sc.parallelize(groups, len(groups)).mapPartitions(
                lambda it: extract_parts(params, itertools.chain.from_iterable(it), counters))
            from pyspark import StorageLevel

            extracted.persist(StorageLevel.MEMORY_AND_DISK)
            buckets = dict(extracted.mapPartitions(bucket_counts)
                           .reduceByKey(add_counts, numPartitions=sc.defaultParallelism).collect())
            summary.extract_seconds = time.perf_counter() - t0
            summary.records_read, summary.bytes_read = records_acc.value, bytes_acc.value
            summary.records_indexed = sum(c[0] for c in buckets.values())
            summary.windows = len({w for w, _b in buckets})
            if not buckets:
                print("[spark-build] no record with keys is stored in the window; nothing built or registered",
                      file=out, flush=True)
                summary.seconds = time.perf_counter() - started
                return summary
            starts = plan_files(buckets, opts.max_items, opts.window_ms)
            progress.total_files = len(starts)
            progress.phase = "build"
            t1 = time.perf_counter()

            def build_partition(it: Iterator[tuple[int, np.ndarray]]) -> Iterator[dict[str, Any]]:
                merged: dict[int, list[np.ndarray]] = {}
                for r, rows in it:
                    merged.setdefault(r, []).append(rows)
                for r, parts in merged.items():
                    yield from build_window_files(params, r, np.concatenate(parts), lambda: files_acc.add(1))
                settle_worker_heap()

            manifests = (extracted.mapPartitions(assign_ranges(starts))
                         .partitionBy(len(starts), lambda r: r)
                         .mapPartitions(build_partition).collect())
            summary.build_seconds = time.perf_counter() - t1
        except BaseException as exc:
            progress.stop()
            deleted = abort_attempt(sc, index_store, plan.name, plan.attempt)
            print(f"[spark-build] FAILED: {_first_cause(exc)}; deleted {deleted} uploaded object(s), nothing "
                  f"registered", file=out, flush=True)
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise BuildFailed(f"build {plan.name} attempt {plan.attempt} failed: {_first_cause(exc)}") from exc
        finally:
            progress.stop()
            if extracted is not None:
                with contextlib.suppress(Exception):
                    extracted.unpersist()
            if own_session:
                spark.stop()
        manifests.sort(key=lambda m: (m["begin_ms"], m["stem"]))
        summary.manifests = manifests
        summary.files = len(manifests)
        summary.items = sum(int(m["items"]) for m in manifests)
        summary.bytes_uploaded = sum(int(m["size"]) for m in manifests)
        try:
            register_build(index_dir, plan.name, plan.attempt, manifests, info=plan.describe())
        except BaseException:
            delete_attempt(index_store, plan.name, plan.attempt)
            raise
        _serve(opts, plan, summary, out)
    index_store.close()
    summary.seconds = time.perf_counter() - started
    print(progress.line().replace("build:", "done:"), file=out, flush=True)
    return summary


_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Aborted|Failed)\w*: ")


def _first_cause(exc: BaseException) -> str:
    """The executor's own error line out of a Py4J/Spark error (the rest is a JVM stack trace)."""
    text = str(exc)
    for line in text.splitlines():
        s = line.strip()
        if _EXC_LINE.match(s) and not s.startswith(("org.", "py4j", "java.", "pyspark.", "scala.")):
            return s
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
