"""The in-memory metadata image every broker replays from the metadata log (KRaft-like).

`MetadataImage.apply(offset, record)` is the only way the image changes; records are plain dicts with a
`type` field (see `broker.metadata.client` for who writes them). Replaying the same log gives the same
image on every broker. The image also answers the read-path lookup `get_objects`: stream objects first,
then the range owning the offset (binary search) -> that node's stream set objects, until covered.

The image holds only what is live, so its size follows live data, not history: deleted streams and
objects are removed, trimmed ranges and objects dropped, an empty range (an epoch that wrote nothing)
dropped when the next epoch opens, destroyed objects kept only until `objects_deleted` (cleanup).
A snapshot (`broker.metadata.snapshot`) stores this image at one log offset.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker.errors import MetadataError, OffsetOutOfRange, StreamNotFound
from broker.metadata.value_version import check_value

OPENED = "OPENED"
CLOSED = "CLOSED"

PREPARED = "PREPARED"
COMMITTED = "COMMITTED"
MARK_DESTROYED = "MARK_DESTROYED"

Record = dict[str, Any]


@dataclass
class RangeMeta:
    """[start, end) of a stream written by `node_id` at stream epoch `epoch`."""

    index: int
    node_id: int
    epoch: int
    start: int
    end: int


@dataclass(frozen=True)
class StreamObjectMeta:
    object_id: int
    stream_id: int
    start: int
    end: int
    size: int


@dataclass
class StreamMeta:
    stream_id: int
    epoch: int = -1
    state: str = CLOSED
    start_offset: int = 0
    end_offset: int = 0
    ranges: list[RangeMeta] = field(default_factory=list)
    stream_objects: list[StreamObjectMeta] = field(default_factory=list)  # sorted by start

    @property
    def owner(self) -> int | None:
        """Node of the current range (the node that opened the stream last)."""
        return self.ranges[-1].node_id if self.ranges else None


@dataclass
class StreamSetObjectMeta:
    object_id: int
    node_id: int
    size: int
    ranges: dict[int, tuple[int, int]]  # stream id -> [start, end)
    # stream id -> when its data here was first committed, for a compaction's output: the newest commit time
    # of the sources' data of that stream (absent: the object's committed_at). Retention by time reads it, so
    # merging a quiet stream's old data with newer data of other streams does not make it look new.
    data_at: dict[int, int] = field(default_factory=dict)


@dataclass
class NodeMeta:
    node_id: int
    epoch: int
    sso: dict[int, StreamSetObjectMeta] = field(default_factory=dict)
    # stream id -> sorted [(start, end, object id)] of this node's stream set objects
    parts: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)


@dataclass
class ObjectMeta:
    object_id: int
    state: str
    prepared_at: int
    expires_at: int
    size: int = 0
    committed_at: int | None = None
    destroyed_at: int | None = None
    # the incarnation that prepared it (None in logs written before this was recorded): once that node's
    # epoch moved on, the object can never be committed, so cleanup expires it without waiting for its TTL
    node_id: int | None = None
    node_epoch: int | None = None


@dataclass(frozen=True)
class ObjectRef:
    """One object holding [start, end) of the looked-up stream."""

    object_id: int
    kind: str  # "SO" or "SSO"
    start: int
    end: int
    size: int


@dataclass(frozen=True)
class ObjectLookup:
    objects: list[ObjectRef]
    next_offset: int  # the first offset the objects do not cover
    partial: bool  # the requested range was not covered (limit, or data the metadata does not know yet)


class KeyValues(dict[str, str]):
    """The image's KV: a dict that also keeps its keys by their first path segment ("topics/", "group_offsets/"),
    so `items_with(prefix)` reads only the keys of the prefix's segment, not every key (100,000 committed offsets
    of consumer groups sit beside a few topics). Writes go through `[k] = v` and `pop` only."""

    def __init__(self) -> None:
        super().__init__()
        self._segments: dict[str, dict[str, str]] = {}
        self._watchers: dict[str, list[Callable[[str, str | None], None]]] = {}  # segment -> watch()'s functions

    @staticmethod
    def _segment(key: str) -> str:
        cut = key.find("/")
        return key if cut < 0 else key[:cut + 1]

    def __setitem__(self, key: str, value: str) -> None:
        super().__setitem__(key, value)
        segment = self._segment(key)
        self._segments.setdefault(segment, {})[key] = value
        watchers = self._watchers.get(segment)
        if watchers:
            for fn in watchers:
                fn(key, value)

    def pop(self, key: str, *default: str | None) -> str | None:  # type: ignore[override]
        segment = self._segments.get(self._segment(key))
        if segment is not None:
            segment.pop(key, None)
        had = key in self
        value = super().pop(key, *default)
        watchers = self._watchers.get(self._segment(key))
        if watchers and had:
            for fn in watchers:
                fn(key, None)
        return value

    def watch(self, segment: str, fn: Callable[[str, str | None], None]) -> None:
        """Call `fn(key, value)` after each write of a key of `segment` (a first path segment with its "/":
        "group_offsets/") and `fn(key, None)` after its removal, in the thread that applies the record (a reader
        keeping its own view of the segment up to date as records come, instead of reading it all again)."""
        self._watchers.setdefault(segment, []).append(fn)

    def unwatch(self, segment: str, fn: Callable[[str, str | None], None]) -> None:
        watchers = self._watchers.get(segment, [])
        if fn in watchers:
            watchers.remove(fn)

    def items_with(self, prefix: str) -> dict[str, str]:
        """Every key starting with `prefix` and its value (a new dict)."""
        cut = prefix.find("/")
        if cut < 0:  # no whole segment: every key is looked at
            return {k: v for k, v in self.items() if k.startswith(prefix)}
        segment = self._segments.get(prefix[:cut + 1], {})
        if cut + 1 == len(prefix):
            return dict(segment)
        return {k: v for k, v in segment.items() if k.startswith(prefix)}


class MetadataImage:
    def __init__(self) -> None:
        self.offset = -1  # last applied log offset
        self.kv = KeyValues()
        self.streams: dict[int, StreamMeta] = {}
        self.nodes: dict[int, NodeMeta] = {}
        self.objects: dict[int, ObjectMeta] = {}
        self.next_stream_id = 0
        self.next_object_id = 0

    # -- replay ----------------------------------------------------------------------------------
    def apply(self, offset: int, rec: Record) -> None:
        if offset <= self.offset:
            raise ValueError(f"metadata log offset {offset} already applied (image at {self.offset})")
        # a record without "v" is version 1, the only one this version writes; a newer node would write "v": 2+
        apply = getattr(self, f"_apply_{rec.get('type')}", None)
        if rec.get("v", 1) != 1 or apply is None:
            raise MetadataError(f"metadata log record at offset {offset} (type {rec.get('type')!r}, version "
                                f"{rec.get('v', 1)!r}) is not one this version of mqindex reads: written by a newer "
                                f"version? Upgrade this node (docs/OPERATIONS.md, Upgrading a cluster)")
        apply(rec)
        self.offset = offset

    def _apply_kv_put(self, r: Record) -> None:
        check_value(r["key"], r["value"])  # a value of a newer format is refused (value_version.py)
        self.kv[r["key"]] = r["value"]

    def _apply_kv_delete(self, r: Record) -> None:
        self.kv.pop(r["key"], None)

    def _apply_node(self, r: Record) -> None:
        node = self.nodes.get(r["node_id"])
        if node is None:
            self.nodes[r["node_id"]] = NodeMeta(r["node_id"], r["epoch"])
        else:
            node.epoch = r["epoch"]

    def _apply_stream_create(self, r: Record) -> None:
        sid = r["stream_id"]
        self.streams[sid] = StreamMeta(sid, start_offset=r["start"], end_offset=r["start"])
        self.next_stream_id = max(self.next_stream_id, sid + 1)

    def _apply_stream_open(self, r: Record) -> None:
        s = self.streams[r["stream_id"]]
        s.epoch = r["epoch"]
        s.state = OPENED
        if s.ranges and s.ranges[-1].start == s.ranges[-1].end:
            s.ranges.pop()  # an epoch that wrote nothing: no object can refer to its empty range
        s.ranges.append(RangeMeta(r["range_index"], r["node_id"], r["epoch"], s.end_offset, s.end_offset))

    def _apply_stream_close(self, r: Record) -> None:
        self.streams[r["stream_id"]].state = CLOSED

    def _apply_stream_trim(self, r: Record) -> None:
        s = self.streams[r["stream_id"]]
        new_start = r["start"]
        s.start_offset = new_start
        s.ranges = [g for i, g in enumerate(s.ranges) if g.end > new_start or i == len(s.ranges) - 1]
        dropped = [o for o in s.stream_objects if o.end <= new_start]
        s.stream_objects = [o for o in s.stream_objects if o.end > new_start]
        self._destroy([o.object_id for o in dropped], r["at"])
        self._drop_sso_parts(s.stream_id, new_start, r["at"])

    def _apply_stream_delete(self, r: Record) -> None:
        s = self.streams.pop(r["stream_id"])
        self._destroy([o.object_id for o in s.stream_objects], r["at"])
        self._drop_sso_parts(s.stream_id, None, r["at"])

    def _drop_sso_parts(self, sid: int, below: int | None, at: int) -> None:
        """Drop the stream's parts of stream set objects that end at or below `below` (None: all of them).
        The parts are sorted by start and a part ends after it starts, so only those starting at or below `below`
        are looked at: a trim costs what it drops, not what the stream still holds."""
        for node in self.nodes.values():
            parts = node.parts.get(sid)
            if not parts:
                continue
            cut = len(parts) if below is None else bisect.bisect_right(parts, below, key=lambda p: p[0])
            keep = []
            for start, end, oid in parts[:cut]:
                if below is None or end <= below:
                    sso = node.sso[oid]
                    sso.ranges.pop(sid, None)
                    sso.data_at.pop(sid, None)
                    if not sso.ranges:
                        del node.sso[oid]
                        self._destroy([oid], at)
                else:
                    keep.append((start, end, oid))
            keep += parts[cut:]
            if keep:
                node.parts[sid] = keep
            else:
                del node.parts[sid]

    def _apply_objects_prepare(self, r: Record) -> None:
        first, count = r["first_id"], r["count"]
        for oid in range(first, first + count):
            self.objects[oid] = ObjectMeta(oid, PREPARED, r["at"], r["expires_at"], node_id=r.get("node_id"),
                                           node_epoch=r.get("node_epoch"))
        self.next_object_id = max(self.next_object_id, first + count)

    def _apply_commit(self, r: Record) -> None:
        at = r["at"]
        node = self.nodes[r["node_id"]]
        touched: list[tuple[int, int]] = []
        if r.get("sso"):
            so = r["sso"]
            ranges = {sid: (start, end) for sid, start, end in so["ranges"]}
            node.sso[so["object_id"]] = StreamSetObjectMeta(so["object_id"], node.node_id, so["size"], ranges)
            for sid, (start, end) in ranges.items():
                bisect.insort(node.parts.setdefault(sid, []), (start, end, so["object_id"]))
                touched.append((sid, end))
            self._commit_object(so["object_id"], so["size"], at)
        for o in r.get("stream_objects", []):
            meta = StreamObjectMeta(o["object_id"], o["stream_id"], o["start"], o["end"], o["size"])
            s = self.streams[o["stream_id"]]
            bisect.insort(s.stream_objects, meta, key=lambda m: m.start)
            touched.append((o["stream_id"], o["end"]))
            self._commit_object(o["object_id"], o["size"], at)
        for sid, end in touched:
            s = self.streams[sid]
            if end > s.end_offset:
                s.end_offset = end
                s.ranges[-1].end = end

    def part_time(self, object_id: int, stream_id: int) -> int | None:
        """When the stream's data in this object was first committed: a compaction output keeps the newest commit
        time of its sources' data of the stream (see StreamSetObjectMeta.data_at); None when not committed."""
        o = self.objects.get(object_id)
        if o is None or o.committed_at is None:
            return None
        nodes = [self.nodes[o.node_id]] if o.node_id in self.nodes else list(self.nodes.values())
        for n in nodes:
            sso = n.sso.get(object_id)
            if sso is not None:
                return sso.data_at.get(stream_id, o.committed_at)
        return o.committed_at

    def _sources_data_at(self, node: NodeMeta, gone: set[int], streams: set[int], at: int) -> dict[int, int]:
        """Per stream, the newest commit time of its data in the compaction sources `gone` (stream set objects of
        `node`, and stream objects of `streams`, the streams the outputs hold)."""
        times: dict[int, int] = {}

        def seen(sid: int, t: int | None) -> None:
            t = at if t is None else t
            times[sid] = max(times.get(sid, t), t)

        for oid in gone & set(node.sso):
            for sid in node.sso[oid].ranges:
                seen(sid, self.part_time(oid, sid))
        for sid in streams:  # a stream object source's stream is one the outputs cover (or it was wholly trimmed)
            s = self.streams.get(sid)
            for o in s.stream_objects if s is not None else ():
                if o.object_id in gone:
                    seen(sid, self.part_time(o.object_id, sid))
        return times

    def _apply_compaction(self, r: Record) -> None:
        """Compaction (broker/compaction): sources leave the lookup and are MARK_DESTROYED; outputs join it.
        Stream end offsets do not move: compaction rewrites data already committed. An output's data keeps the
        commit time of the sources' (retention by time and force-split go by it), not the compaction's."""
        at = r["at"]
        node = self.nodes[r["node_id"]]
        gone = set(r["destroyed"])
        outputs = {o["stream_id"] for o in r.get("stream_objects", [])}
        outputs |= {sid for sid, _, _ in r["sso"]["ranges"]} if r.get("sso") else set()
        data_at = self._sources_data_at(node, gone, outputs, at)
        for oid in gone & set(node.sso):
            for sid in node.sso.pop(oid).ranges:
                keep = [p for p in node.parts.get(sid, []) if p[2] != oid]
                if keep:
                    node.parts[sid] = keep
                else:
                    node.parts.pop(sid, None)
        for s in self.streams.values():
            if s.stream_objects and any(o.object_id in gone for o in s.stream_objects):
                s.stream_objects = [o for o in s.stream_objects if o.object_id not in gone]
        self._destroy(sorted(gone), r.get("destroyed_at", at))  # deletable once the grace period is over
        if r.get("sso"):
            so = r["sso"]
            ranges = {sid: (start, end) for sid, start, end in so["ranges"]}
            times = {sid: data_at.get(sid, at) for sid in ranges}
            node.sso[so["object_id"]] = StreamSetObjectMeta(so["object_id"], node.node_id, so["size"], ranges, times)
            for sid, (start, end) in ranges.items():
                bisect.insort(node.parts.setdefault(sid, []), (start, end, so["object_id"]))
            self._commit_object(so["object_id"], so["size"], max(times.values(), default=at))
        for o in r.get("stream_objects", []):
            meta = StreamObjectMeta(o["object_id"], o["stream_id"], o["start"], o["end"], o["size"])
            bisect.insort(self.streams[o["stream_id"]].stream_objects, meta, key=lambda m: m.start)
            self._commit_object(o["object_id"], o["size"], data_at.get(o["stream_id"], at))

    def _commit_object(self, oid: int, size: int, at: int) -> None:
        o = self.objects[oid]
        o.state, o.size, o.committed_at = COMMITTED, size, at

    def _apply_objects_destroy(self, r: Record) -> None:
        self._destroy(r["ids"], r["at"])

    def _destroy(self, ids: list[int], at: int) -> None:
        for oid in ids:
            o = self.objects.get(oid)
            if o is not None and o.state != MARK_DESTROYED:
                o.state, o.destroyed_at = MARK_DESTROYED, at

    def _apply_objects_deleted(self, r: Record) -> None:
        for oid in r["ids"]:
            self.objects.pop(oid, None)

    # -- queries ---------------------------------------------------------------------------------
    def stream(self, stream_id: int) -> StreamMeta:
        s = self.streams.get(stream_id)
        if s is None:
            raise StreamNotFound(f"stream {stream_id} does not exist")
        return s

    def get_objects(self, stream_id: int, start: int, end: int, limit: int = 1 << 30) -> ObjectLookup:
        """Objects covering [start, end) of a stream, in offset order, at most `limit` of them."""
        s = self.stream(stream_id)
        if start < s.start_offset:
            raise OffsetOutOfRange(f"stream {stream_id}: offset {start} is below the stream start {s.start_offset}")
        end = min(end, s.end_offset)
        out: list[ObjectRef] = []
        pos = start
        sos = s.stream_objects
        i = bisect.bisect_right(sos, pos, key=lambda m: m.end)  # first stream object ending after pos
        range_starts = [g.start for g in s.ranges]
        while pos < end and len(out) < limit:
            # 1. stream objects, in order, while they cover pos
            if i < len(sos) and sos[i].start <= pos:
                so = sos[i]
                out.append(ObjectRef(so.object_id, "SO", so.start, so.end, so.size))
                pos = so.end
                i += 1
                continue
            # 2. the range owning pos -> that node's stream set objects
            g = bisect.bisect_right(range_starts, pos) - 1
            if g < 0 or pos >= s.ranges[g].end:
                break
            node = self.nodes.get(s.ranges[g].node_id)
            parts = node.parts.get(stream_id, []) if node is not None else []
            j = bisect.bisect_right(parts, pos, key=lambda p: p[0]) - 1
            if j < 0 or parts[j][1] <= pos:
                break  # the metadata does not know this offset yet: a partial answer
            pstart, pend, oid = parts[j]
            out.append(ObjectRef(oid, "SSO", pstart, pend, node.sso[oid].size if node else 0))
            pos = pend
        return ObjectLookup(out, pos, pos < end)
