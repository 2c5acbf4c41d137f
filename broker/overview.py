"""Read-only views for operators (the web console, `mqindex topics describe`): partitions with their leader,
epochs, offsets and bytes in object storage; the objects in the store; index files with their upload lag.

Everything here is read from the metadata image and the node's own parts; nothing is written.
"""

from __future__ import annotations

import time
from typing import Any

from broker.cluster.assignment import leaders
from broker.metadata import MetadataClient
from broker.metadata.image import MetadataImage
from broker.partitions.partition_map import PartitionMap

#: index file states whose data is not (yet) in object storage
LOCAL_STATES = ("WRITING", "SEALED", "COMPACTED")


def _stream_bytes(image: MetadataImage, stream_ids: set[int]) -> dict[int, tuple[int, int]]:
    """(bytes, objects) of each stream of `stream_ids` in object storage: its stream objects exactly, plus its
    share of each stream set object it has a range in (the object's size apportioned by offsets: an estimate).
    One pass over the stream set objects for all the streams."""
    out: dict[int, list[int]] = {}
    for stream_id in stream_ids:
        s = image.streams.get(stream_id)
        out[stream_id] = [sum(o.size for o in s.stream_objects), len(s.stream_objects)] if s is not None else [0, 0]
    for node in image.nodes.values():
        for sso in node.sso.values():
            offsets = sum(b - a for a, b in sso.ranges.values())
            for stream_id, (a, b) in sso.ranges.items():
                got = out.get(stream_id)
                if got is None:
                    continue
                got[0] += sso.size * (b - a) // offsets if offsets else 0
                got[1] += 1
    return {k: (v[0], v[1]) for k, v in out.items()}


def partitions(parts: PartitionMap, meta: MetadataClient, topic: str | None = None) -> list[dict[str, Any]]:
    """Every partition (of `topic`, or all) with leader node and epoch, stream epoch, [start, end) offsets and
    its bytes in object storage."""
    lead = leaders(meta, refresh=True)
    infos = [parts.topic(topic)] if topic is not None else parts.list_topics()
    rows = [(info, parts.partition(info, index)) for info in sorted(infos, key=lambda i: i.name)
            for index in range(info.partitions)]
    with meta._lock:  # the image is applied in place under this lock: one consistent view for the byte counts
        sizes = _stream_bytes(meta.image, {p.data_stream for _, p in rows})
    out: list[dict[str, Any]] = []
    for info, p in rows:
        index = p.index
        start, end = parts.bounds(p)
        leader = lead.get((info.topic_id, index))
        size, objects = sizes[p.data_stream]
        out.append({"topic": info.name, "partition": index,
                    "leader": None if leader is None else leader.node,
                    "leader_epoch": None if leader is None else leader.epoch,
                    "stream_epoch": p.epoch, "owned": p.owned, "start_offset": start, "end_offset": end,
                    "bytes": size, "objects": objects, "data_stream": p.data_stream})
    return out


def objects(meta: MetadataClient) -> dict[str, Any]:
    """Stream set objects and stream objects: counts and bytes, per node for the stream set objects."""
    meta.catch_up()
    with meta._lock:  # the image is applied in place under this lock
        image = meta.image
        per_node = {n.node_id: {"count": len(n.sso), "bytes": sum(o.size for o in n.sso.values())}
                    for n in image.nodes.values()}
        sos = [o for s in image.streams.values() for o in s.stream_objects]
        states: dict[str, int] = {}
        for o in image.objects.values():
            states[o.state] = states.get(o.state, 0) + 1
    return {"stream_set_objects": {"count": sum(v["count"] for v in per_node.values()),
                                   "bytes": sum(v["bytes"] for v in per_node.values()),
                                   "per_node": {str(k): v for k, v in sorted(per_node.items())}},
            "stream_objects": {"count": len(sos), "bytes": sum(o.size for o in sos)},
            "object_states": dict(sorted(states.items()))}


def index_files(files: list[dict[str, Any]], now_ms: int | None = None) -> list[dict[str, Any]]:
    """The index files with `upload_lag_ms`: for a file on local disk waiting to be uploaded, how long its oldest
    item has waited to reach object storage; 0 once uploaded (or imported, or expired); None while the file is
    still being written (it is not waiting for the upload yet)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return [f | {"upload_lag_ms": None if f["state"] == "WRITING" else
                 max(0, now - int(f["begin_ms"])) if f["state"] in LOCAL_STATES else 0}
            for f in files]
