"""Planning a read of topics from the controller metadata (no object GET): which partitions, which offset
range of each, which object parts hold it, and how the parts become Spark tasks.

- Offsets: each partition reads [start, end) where start/end come from startingOffsets / endingOffsets and
  any pushed `offset` bounds. `latest` is the partition's **committed end**: the end of the last object the
  broker uploaded and committed in the metadata. Records still only in a node's WAL or log cache (at most
  one upload interval of data) are not read: the reader's upper bound is what the metadata says is in the
  store, and `ScanPlan.describe()` reports how far each partition was read (`read_to`). With the
  `kafka.bootstrap.servers` option `latest` is the partition's high watermark instead, and the offsets past
  the committed end are a `Tail` each, read through Kafka (tail.py).
- Objects: the read-path lookup (`MetadataClient.get_objects`) gives the stream objects and stream set
  object parts covering [start, end); only those are listed, so an offset range prunes every object
  outside it before any GET.
- Time: a record is stored before the object holding it is committed, so a part whose data was committed
  (`MetadataImage.part_time`) more than the `timeSkewMs` option (5 min) before the lower time bound holds no row of the
  range and is skipped. The upper time bound cannot prune from the metadata alone (a commit time is not
  a lower bound of its records' times); rows are filtered while reading.
- Splits: a part larger than `max_split_bytes` is cut into offset ranges of about that many bytes (each
  piece reads only the blocks overlapping its range); parts are then packed, in order, into tasks of at
  most `max_split_bytes` bytes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from broker.metadata import MetadataClient
from broker.partitions.topics import TopicInfo, TopicRegistry
from jobs.spark_source.options import DEFAULT_SKEW_MS, EARLIEST, LATEST, SourceOptionError, SourceOptions
from jobs.spark_source.tail import Tail, Watermarks


class DataLoss(RuntimeError):
    """A requested offset is no longer retained (failOnDataLoss=true)."""


@dataclass(frozen=True)
class Split:
    """Offsets [start, end) of one partition, read from one object (`key`, `size` bytes) of `stream_id`."""

    topic: str
    partition: int
    stream_id: int
    object_id: int
    kind: str  # "SO" or "SSO"
    key: str
    size: int  # the object's size (skips a HEAD)
    start: int
    end: int
    est_bytes: int  # this part's share of the object


@dataclass(frozen=True)
class PartitionRange:
    topic: str
    partition: int
    stream_id: int
    start: int  # first offset read
    end: int  # offset read up to (exclusive)
    retained_start: int  # the partition's first retained offset
    committed_end: int  # the end of the data in committed objects (= `latest`)


@dataclass
class ScanPlan:
    ranges: list[PartitionRange]
    splits: list[Split]
    pruned_by_time: int = 0  # object parts skipped because their data was committed before the time range
    listed_parts: int = 0  # object parts covering the offset ranges
    tasks: list[list[Split]] = field(default_factory=list)
    tails: list[Tail] = field(default_factory=list)  # offsets past the committed end, read through Kafka

    def describe(self) -> dict[str, Any]:
        return {"partitions": len(self.ranges), "objects": len({s.object_id for s in self.splits}),
                "splits": len(self.splits), "tasks": len(self.tasks), "pruned_by_time": self.pruned_by_time,
                "bytes": sum(s.est_bytes for s in self.splits),
                "tail_offsets": sum(t.end - t.start for t in self.tails),
                "read_to": {f"{r.topic}/{r.partition}": r.end for r in self.ranges}}


@dataclass(frozen=True)
class Bounds:
    """What pushed filters and options narrow a read to (None: unbounded)."""

    from_ms: int | None = None
    to_ms: int | None = None  # exclusive
    offset_lo: int | None = None
    offset_hi: int | None = None  # exclusive
    partitions: frozenset[int] | None = None

    def tighten(self, **kw: Any) -> Bounds:
        vals = {k: getattr(self, k) for k in ("from_ms", "to_ms", "offset_lo", "offset_hi", "partitions")}
        for k, v in kw.items():
            if v is None:
                continue
            cur = vals[k]
            if cur is None:
                vals[k] = v
            elif k in ("from_ms", "offset_lo"):
                vals[k] = max(cur, v)
            elif k == "partitions":
                vals[k] = cur & v
            else:
                vals[k] = min(cur, v)
        return Bounds(**vals)


def open_metadata(opts: SourceOptions) -> MetadataClient:
    try:
        return MetadataClient(opts.metadata_url, node_id=-1, namespace=opts.namespace)
    except Exception as exc:  # noqa: BLE001 - any connection error is an option error here
        raise SourceOptionError(f"metadata: cannot read the controller metadata at {opts.metadata_url}: "
                                f"{exc}") from None


def resolve_topics(meta: MetadataClient, opts: SourceOptions) -> list[TopicInfo]:
    reg = TopicRegistry(meta)
    if opts.pattern is not None:
        rx = re.compile(opts.pattern)
        names = [n for n in sorted(reg.names()) if rx.fullmatch(n)]
    else:
        names = list(opts.topics)
    out = []
    for n in names:
        info = reg.get(n)
        if info is None:
            known = reg.names()
            raise SourceOptionError(f"topic: unknown topic {n!r} (topics in the metadata: "
                                    f"{', '.join(sorted(known)) if known else 'none'})")
        out.append(info)
    return out


def _part_bytes(meta: MetadataClient, object_id: int, kind: str, size: int, stream_id: int, start: int,
                end: int) -> int:
    """A stream object's size; a stream set object's size shared out by the offsets each stream has in it."""
    if kind == "SO":
        return size
    for node in meta.image.nodes.values():
        sso = node.sso.get(object_id)
        if sso is not None:
            total = sum(e - s for s, e in sso.ranges.values()) or 1
            return max(1, size * (end - start) // total)
    return size


def partition_ranges(meta: MetadataClient, topics: list[TopicInfo], opts: SourceOptions, bounds: Bounds,
                     starting: Any = None, ending: Any = None, watermark: Callable[[str, int], int] | None = None
                     ) -> list[PartitionRange]:
    """Each chosen partition's [start, end) read: options, then pushed offset bounds; `starting` / `ending`
    (a {topic: {partition: offset}} map, the streaming reader's) replace the options when given. With
    `watermark` (topic, partition -> high watermark), a read may go past the committed end up to it."""
    out = []
    for info in topics:
        parts = list(range(info.partitions))
        if opts.partitions is not None:
            bad = [p for p in opts.partitions if p >= info.partitions]
            if bad and opts.pattern is None:
                raise SourceOptionError(f"partitions: topic {info.name!r} has partitions 0..{info.partitions - 1}, "
                                        f"not {bad}")
            parts = [p for p in parts if p in opts.partitions]
        if bounds.partitions is not None:
            parts = [p for p in parts if p in bounds.partitions]
        for p in parts:
            sid = info.streams[p].data_stream
            s = meta.get_stream(sid, refresh=False)
            first, last = s.start_offset, s.end_offset
            top = last if watermark is None else max(last, watermark(info.name, p))  # the end a read may reach
            if starting is not None:
                want_lo = starting.get(info.name, {}).get(p, EARLIEST)
            else:
                want_lo = opts.offset_for(opts.starting, info.name, p, EARLIEST)
            if ending is not None:
                want_hi = ending.get(info.name, {}).get(p, LATEST)
            else:
                want_hi = opts.offset_for(opts.ending, info.name, p, LATEST)
            lo = first if want_lo == EARLIEST else (top if want_lo == LATEST else want_lo)
            hi = top if want_hi == LATEST else (first if want_hi == EARLIEST else want_hi)
            if lo < first:
                if opts.fail_on_data_loss and want_lo >= 0:
                    raise DataLoss(f"{info.name}/{p}: offset {lo} is no longer retained (the partition starts at "
                                   f"{first}); set failOnDataLoss=false to read from {first}")
                lo = first
            hi = min(hi, top)
            if bounds.offset_lo is not None:
                lo = max(lo, bounds.offset_lo)
            if bounds.offset_hi is not None:
                hi = min(hi, bounds.offset_hi)
            out.append(PartitionRange(info.name, p, sid, lo, max(lo, hi), first, last))
    return out


def list_splits(meta: MetadataClient, r: PartitionRange, from_ms: int | None, max_split_bytes: int,
                skew_ms: int = DEFAULT_SKEW_MS) -> tuple[list[Split], int, int]:
    """(splits, parts listed, parts pruned by time) of one partition range, in offset order."""
    splits: list[Split] = []
    listed = pruned = 0
    pos = r.start
    while pos < r.end:
        lookup = meta.get_objects(r.stream_id, pos, r.end, refresh=False)
        for ref in lookup.objects:
            listed += 1
            start, end = max(ref.start, r.start), min(ref.end, r.end)
            if end <= start:
                continue
            t = meta.image.part_time(ref.object_id, r.stream_id)
            if from_ms is not None and t is not None and t + skew_ms < from_ms:
                pruned += 1
                continue
            est = _part_bytes(meta, ref.object_id, ref.kind, ref.size, r.stream_id, ref.start, ref.end)
            est = max(1, est * (end - start) // max(1, ref.end - ref.start))
            pieces = max(1, min(end - start, math.ceil(est / max_split_bytes)))
            step = math.ceil((end - start) / pieces)
            key = meta.object_key(ref.object_id)
            for a in range(start, end, step):
                b = min(end, a + step)
                splits.append(Split(r.topic, r.partition, r.stream_id, ref.object_id, ref.kind, key, ref.size, a, b,
                                    max(1, est * (b - a) // (end - start))))
        if lookup.next_offset <= pos or not lookup.objects:
            break
        pos = lookup.next_offset
    return splits, listed, pruned


def pack_tasks(splits: list[Split], max_split_bytes: int) -> list[list[Split]]:
    """Splits in order, packed into tasks of at most `max_split_bytes` estimated bytes (at least one split each)."""
    tasks: list[list[Split]] = []
    cur: list[Split] = []
    size = 0
    for s in splits:
        if cur and size + s.est_bytes > max_split_bytes:
            tasks.append(cur)
            cur, size = [], 0
        cur.append(s)
        size += s.est_bytes
    if cur:
        tasks.append(cur)
    return tasks


def in_waves(splits: list[Split], task_bytes: int, slots: int) -> list[list[Split]]:
    """Splits in order, in tasks that fill whole waves of `slots` tasks running at once: as many tasks of at most
    about `task_bytes` estimated bytes as cover the splits, that number rounded up to a multiple of `slots` when
    it is more than `slots` (fewer all run at once: smaller tasks would only cost more), each of the same
    estimated bytes. A split is cut at the offset where a task's share ends (its bytes estimated in proportion to
    its offsets, as `list_splits` cuts a part); adjacent pieces of one object in a task become one split. Spark
    gives a task to each free slot, so 9 tasks of a 2-slot executor take 5 tasks' time, one slot idle during the
    last; 10 take 5 times a tenth instead of a ninth (docs/BENCHMARKS.md)."""
    if not splits:
        return []
    total = sum(s.est_bytes for s in splits)
    slots = max(1, slots)
    count = max(1, math.ceil(total / max(1, task_bytes)))
    if count > slots:
        count = math.ceil(count / slots) * slots
    ends = [total * k // count for k in range(1, count)]  # the estimated byte at which each task but the last ends
    tasks: list[list[Split]] = [[] for _ in range(count)]

    def put(k: int, s: Split, a: int, b: int) -> None:
        piece = s if (a, b) == (s.start, s.end) else replace(
            s, start=a, end=b, est_bytes=max(1, s.est_bytes * (b - a) // (s.end - s.start)))
        task = tasks[k]
        last = task[-1] if task else None
        if last is not None and (last.stream_id, last.object_id, last.end) == (s.stream_id, s.object_id, a):
            task[-1] = replace(last, end=b, est_bytes=last.est_bytes + piece.est_bytes)
        else:
            task.append(piece)

    at = 0  # estimated bytes of the splits before this one
    k = 0  # the task being filled
    for s in splits:
        a = s.start
        while k < count - 1 and ends[k] < at + s.est_bytes:  # task k ends inside this split (or before it)
            cut = min(s.end, max(a, s.start + (s.end - s.start) * (ends[k] - at) // s.est_bytes))
            if cut > a:
                put(k, s, a, cut)
                a = cut
            k += 1
        if a < s.end:
            put(k, s, a, s.end)
        at += s.est_bytes
    return [t for t in tasks if t]


def plan_scan(opts: SourceOptions, bounds: Bounds | None = None, starting: Any = None, ending: Any = None,
              meta: MetadataClient | None = None) -> ScanPlan:
    """The whole read plan from the metadata; SourceOptionError / DataLoss for what cannot be read."""
    bounds = bounds or Bounds()
    bounds = bounds.tighten(from_ms=opts.from_ms, to_ms=opts.to_ms)
    own = meta is None
    meta = meta or open_metadata(opts)
    marks: Watermarks | None = None
    try:
        if opts.kafka is not None and starting is None:
            marks = Watermarks(dict(opts.kafka))
        meta.catch_up()
        topics = resolve_topics(meta, opts)
        ranges = partition_ranges(meta, topics, opts, bounds, starting, ending,
                                  marks.get if marks is not None else None)
        plan = ScanPlan(ranges, [])
        empty_time = bounds.from_ms is not None and bounds.to_ms is not None and bounds.from_ms >= bounds.to_ms
        for r in ranges:
            if empty_time:
                break
            splits, listed, pruned = list_splits(meta, r, bounds.from_ms, opts.max_split_bytes, opts.skew_ms)
            plan.splits += splits
            plan.listed_parts += listed
            plan.pruned_by_time += pruned
            if r.end > max(r.start, r.committed_end):
                plan.tails.append(Tail(r.topic, r.partition, max(r.start, r.committed_end), r.end))
        plan.tasks = pack_tasks(plan.splits, opts.max_split_bytes)
        return plan
    finally:
        if marks is not None:
            marks.close()
        if own:
            meta.close()
