"""Retention: how far a partition's data stream may be trimmed, by time and by size.

Granularity is one object part (a stream object, or this stream's range in a stream set object), like
Kafka deleting whole segments:
- by time: a part is expired when its object was committed before now - retention_ms (every record in
  it was stored no later than its commit, so this never drops a record younger than the retention);
- by size: while the stream's bytes (committed parts + what the log cache still holds) minus the oldest
  part stay at or above retention_bytes, that part goes.
The new start offset is the end of the last expired part. Trimming the stream in the metadata marks
objects wholly below it MARK_DESTROYED; `cleanup_objects` then deletes them from the store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from broker.errors import Fenced, StreamNotFound
from broker.metadata import MetadataClient
from broker.partitions import topic_config
from broker.partitions.partition_map import PartitionMap
from broker.streams.stream_reader import StreamReader

log = logging.getLogger("mqindex.broker.retention")


@dataclass(frozen=True)
class RetentionPolicy:
    retention_ms: int | None = None  # None: keep forever
    retention_bytes: int | None = None  # None: no size limit

    @property
    def active(self) -> bool:
        return self.retention_ms is not None or self.retention_bytes is not None


def part_bytes(reader: StreamReader, stream_id: int, object_id: int, kind: str, size: int, start: int,
               end: int) -> int:
    """Bytes of one stream's part in an object: the object size for a stream object, the stream's blocks
    of a stream set object (from its index, read once and cached)."""
    if kind == "SO":
        return size
    entries = reader.reader(object_id, size).entries_for(stream_id, start, end)
    return sum(e.size for e in entries)


def retention_start(meta: MetadataClient, reader: StreamReader, stream_id: int, cached_bytes: Callable[[int], int],
                    policy: RetentionPolicy, now_ms: int) -> int:
    """The start offset retention allows for the stream (its current start when nothing expires).
    `cached_bytes(end)`: the bytes of the stream's records not yet uploaded that end after `end`, so that a record
    committed meanwhile, still in the cache until the upload marks it, is counted once (with its object)."""
    s = meta.get_stream(stream_id)
    start = s.start_offset
    if not policy.active or s.end_offset <= start:
        return start
    refs = meta.get_objects(stream_id, start, s.end_offset, refresh=False).objects
    new_start = start
    if policy.retention_ms is not None:
        cutoff = now_ms - policy.retention_ms
        for ref in refs:
            t = meta.image.part_time(ref.object_id, stream_id)  # the data's commit time, kept by compaction
            if t is None or t >= cutoff:
                break
            new_start = ref.end
    if policy.retention_bytes is not None:
        sizes = [part_bytes(reader, stream_id, r.object_id, r.kind, r.size, r.start, r.end) for r in refs]
        total = sum(sizes) + cached_bytes(s.end_offset)
        for ref, size in zip(refs, sizes, strict=True):
            if total - size < policy.retention_bytes:
                break
            total -= size
            new_start = max(new_start, ref.end)
    return new_start


def topic_policy(parts: PartitionMap, topic: str, default: RetentionPolicy) -> RetentionPolicy:
    """The topic's retention: its `retention.ms` / `retention.bytes` configs, else the server default."""
    ms, by = topic_config.effective(parts.registry.configs(topic, refresh=False),
                                    topic_config.ServerDefaults(default.retention_ms, default.retention_bytes))
    return RetentionPolicy(ms, by)


def apply_retention(parts: PartitionMap, default: RetentionPolicy, now_ms: int) -> dict[str, int]:
    """One retention pass over the partitions this node leads: trim each data stream to what its topic's
    policy keeps (`default` for topics that set none), and each meta stream to its newest state record.
    Returns the new start offsets by partition."""
    trimmed: dict[str, int] = {}
    owned = parts.owned()
    parts.meta.catch_up()
    policies: dict[str, RetentionPolicy] = {}
    for p in owned:
        data = p.data
        if data is None:
            continue
        name = p.topic.name
        try:
            if name not in policies:
                policies[name] = topic_policy(parts, name, default)
        except RuntimeError as exc:  # damaged configs: keep the data, say which topic
            log.error("topic configs unreadable; retention skipped", extra={"topic": name, "error": str(exc)})
            continue
        policy = policies[name]
        try:
            if policy.active:
                sid = p.data_stream
                new_start = retention_start(parts.meta, parts.storage.reader, sid,
                                            lambda end, sid=sid: parts.storage.cached_bytes(sid, end), policy, now_ms)
                if new_start > parts.start_offset(p):
                    data.trim(new_start)
                    trimmed[p.name] = new_start
                    log.info("retention trimmed", extra={"topic": p.topic.name, "partition": p.index,
                                                         "stream": p.data_stream, "start_offset": new_start})
            p.trim_meta()
        except (Fenced, StreamNotFound) as exc:  # fenced, or the topic was deleted meanwhile
            parts.storage.check_fenced([p.data_stream], exc)
    if trimmed:
        parts.write_states([p for p in owned if p.name in trimmed], clean=False)
    return trimmed


def data_is_live(parts: PartitionMap, topic: str, partition: int, max_offset: int) -> bool:
    """Whether the partition still stores any offset <= max_offset (the index's expiry asks this for each
    range of a file: a file goes once every range in it is below its partition's start offset). A deleted
    topic's ranges are dead. A topic or partition the metadata does not know and never deleted is kept:
    the index and the metadata disagree, and deleting on a disagreement would lose lookups. (A range of a
    deleted topic whose name was created again is taken for the new topic's: it stays until the new
    topic's start offset passes it; key lookups skip its entries meanwhile.)"""
    info = parts.cached_topic(topic) or parts.registry.get(topic, refresh=False)
    if info is None and parts.registry.deleted_before(topic):
        return False
    if info is None or not 0 <= partition < info.partitions:
        log.warning("index range of an unknown partition kept", extra={"topic": topic, "partition": partition})
        return True
    stream = info.streams[partition].data_stream
    try:
        return max_offset >= parts.meta.get_stream(stream, refresh=False).start_offset
    except StreamNotFound:
        return False  # deleted with its topic
