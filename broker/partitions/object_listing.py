"""The objects holding a topic's partitions, from the controller metadata (driver side of batch builds).

For each chosen partition: the topic registry gives its data stream (`partitions/<topic_id>/<p>` in
the KV), the stream gives its live range [start_offset, end_offset), and the read-path lookup
(`MetadataClient.get_objects`: stream objects, then the owning range's stream set objects) gives every
committed object covering that range with the part [start, end) of the stream it holds. Records still
in a broker's WAL/log cache are not in any object yet and are not listed.

Time pruning: a record is stored before the object holding it is committed, so an object committed
before `from_ms` (minus a clock-skew allowance) holds no record at or after `from_ms` and is skipped.
Objects cannot be pruned by the end of a window without reading them; executors filter records by
store time.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.metadata import MetadataClient
from broker.partitions.topic_errors import TopicNotFound
from broker.partitions.topics import TopicInfo, TopicRegistry

#: allowance for clock skew between the broker that stamped a record and the one that committed it
CLOCK_SKEW_MS = 5 * 60 * 1000


@dataclass(frozen=True)
class ObjectPart:
    """One object's part of one partition: offsets [start, end) of `stream_id` in object `key`."""

    topic: str
    partition: int
    stream_id: int
    object_id: int
    kind: str  # "SO" or "SSO"
    key: str
    size: int
    start: int
    end: int
    committed_at: int | None

    @property
    def offsets(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class PartitionListing:
    partition: int
    stream_id: int
    start_offset: int
    end_offset: int  # committed end (offsets beyond it are not in objects yet)
    parts: list[ObjectPart]
    pruned: int  # objects skipped because they were committed before the window


def open_topic(meta: MetadataClient, topic: str) -> TopicInfo:
    info = TopicRegistry(meta).get(topic)
    if info is None:
        raise TopicNotFound(topic)
    return info


def list_partition_objects(meta: MetadataClient, info: TopicInfo, partition: int, from_ms: int | None = None,
                           skew_ms: int = CLOCK_SKEW_MS) -> PartitionListing:
    """Every committed object part of one partition's data stream, in offset order (see module doc)."""
    if not 0 <= partition < info.partitions:
        raise ValueError(f"topic {info.name!r} has partitions 0..{info.partitions - 1}, not {partition}")
    sid = info.streams[partition].data_stream
    s = meta.get_stream(sid, refresh=False)
    parts: list[ObjectPart] = []
    pruned = 0
    pos, end = s.start_offset, s.end_offset
    while pos < end:
        lookup = meta.get_objects(sid, pos, end, refresh=False)
        for ref in lookup.objects:
            o = meta.image.objects.get(ref.object_id)
            committed = o.committed_at if o is not None else None
            if from_ms is not None and committed is not None and committed + skew_ms < from_ms:
                pruned += 1
                continue
            parts.append(ObjectPart(info.name, partition, sid, ref.object_id, ref.kind,
                                    meta.object_key(ref.object_id), ref.size, max(ref.start, s.start_offset),
                                    ref.end, committed))
        if lookup.next_offset <= pos or not lookup.objects:
            break  # the metadata knows nothing beyond this offset
        pos = lookup.next_offset
    return PartitionListing(partition, sid, s.start_offset, s.end_offset, parts, pruned)
