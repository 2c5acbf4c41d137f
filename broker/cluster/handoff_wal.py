"""The WAL ranges a hand-off lends to the partition's next owner (a move over the shared WAL, no upload first).

A source that hands a partition off over the shared WAL (broker/streams/object_wal.py) does not upload what
it holds: it records, in the metadata KV under `handoffs/<topic id>/<partition>`, for each of the two streams
its acknowledged end and where the records above the committed end are:

    {"source": 1, "streams": {"<stream id>": {"end": 1234, "segments": [
        {"node": 0, "end": 1000, "objects": [["wal/node-0/000..", wal_start, wal_next], ...]},
        {"node": 1, "end": 1234, "objects": [...]}]}}}

(a segment per node, oldest first: a partition moved on before its previous move was committed carries the
earlier segments along). The doc is written before the streams are closed, so whoever opens them next (the
target, a survivor failing over the target, the target restarted) sees it, reads those WAL byte ranges and
puts the records in its cache in front of what it appends itself. Each lending node keeps those WAL records
until the metadata shows the stream committed past its segment (StreamStorage.lend/release_lent); a failover
of a lending node keeps the objects the doc names. The doc is dropped once both streams are committed past
their ends (`drop_committed`).

A failover of a lending node deletes its WAL objects but the ones a pending doc still reads (`kept_objects`);
it records those under `handoff-kept/<node>` first (`keep`), and once no pending doc reads one of them any
more (its stream committed past the segment: the next owner uploaded the range) it is deleted after
`KEPT_GRACE_S` (`sweep_kept`, every node's watcher; the grace covers a node that read a doc just before it was
dropped and is still reading the range):

    {"objects": {"wal/node-1/0000..": null, "wal/node-1/0000..": 1732671234000}}   (null: still read; else
                                                                                      unread since that time)
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from broker.metadata import MetadataClient
from broker.objects.format import StreamRecord
from broker.partitions.partition import Partition
from broker.partitions.partition_map import PartitionMap
from broker.streams.object_wal import ObjectWal
from broker.streams.storage import decode_stream_record
from broker.streams.stream import Stream
from broker.streams.wal import DEFAULT_MAX_BODY, scan_records
from storage_tier import BlobStore

log = logging.getLogger("mqindex.broker.cluster")

PREFIX = "handoffs/"
KEPT_PREFIX = "handoff-kept/"
#: seconds a kept WAL object of a failed-over node stays after no pending hand-off reads it any more
KEPT_GRACE_S = 60.0


def doc_key(topic_id: int, partition: int) -> str:
    return f"{PREFIX}{topic_id}/{partition}"


def shared_wal(parts: PartitionMap) -> ObjectWal | None:
    wal = parts.storage.wal
    return wal if isinstance(wal, ObjectWal) else None


def docs(meta: MetadataClient, refresh: bool = False) -> dict[str, dict[str, Any]]:
    return {k: json.loads(v) for k, v in meta.kv_items(PREFIX, refresh=refresh).items()}


def stream_entries(meta: MetadataClient, refresh: bool = False) -> dict[int, dict[str, Any]]:
    """Stream id -> {"end", "segments"} of every pending hand-off."""
    out: dict[int, dict[str, Any]] = {}
    for doc in docs(meta, refresh).values():
        for sid, entry in doc.get("streams", {}).items():
            out[int(sid)] = entry
    return out


def lend_doc(parts: PartitionMap, p: Partition, wal: ObjectWal) -> dict[str, Any]:
    """The doc of the module docstring for `p`, whose streams this node stopped appending to (the caller
    waited for their acknowledgements)."""
    prior = stream_entries(parts.meta)
    streams = {}
    for s in (p.meta, p.data):
        assert s is not None
        committed = s.committed_end
        before = prior.get(s.stream_id)
        segments: list[dict[str, Any]] = []
        above = committed
        if before is not None and before["end"] > committed:  # moved here before it was committed
            segments = [g for g in before["segments"] if g["end"] > committed]
            above = before["end"]
        if s.confirmed_end > above:
            ranges = parts.storage.tracker.ranges_of(s.stream_id, above)
            objects = wal.objects_of(ranges)
            segments.append({"node": parts.node_id, "end": s.confirmed_end,
                             "objects": [[k, lo, hi] for k, lo, hi in objects]})
        streams[str(s.stream_id)] = {"end": s.confirmed_end, "segments": segments}
    return {"source": parts.node_id, "streams": streams}


def load(store: BlobStore, entry: dict[str, Any], stream_id: int, above: int,
         max_body: int = DEFAULT_MAX_BODY) -> list[StreamRecord]:
    """The records of `stream_id` ending after `above` in the doc entry's WAL ranges, in offset order."""
    out: list[StreamRecord] = []
    for seg in entry["segments"]:
        if seg["end"] <= above:
            continue
        for key, lo, hi in seg["objects"]:
            obj_start = int(key.rsplit("/", 1)[1])
            data = store.get(key, lo - obj_start, hi - obj_start)
            recs, _end, why = scan_records(data, lo, lo, max_body)
            if why:
                raise ValueError(f"WAL object {key} of node {seg['node']} is damaged at {_end}: {why}")
            for w in recs:
                rec = decode_stream_record(w.body)
                if rec.stream_id == stream_id and rec.last_offset > above:
                    out.append(rec)
    return out


def borrow(parts: PartitionMap, store: BlobStore, p: Partition, entries: dict[int, dict[str, Any]],
           served: threading.Event | None = None) -> list[int]:
    """Target side, right after the claim: the streams of `p` continue at the source's acknowledged end; the
    meta stream's moved records are read now (the state record is among them), the data stream's in the
    background once `served` is set and the first record appended here is acknowledged (`after_first_acks`).
    Returns the stream ids that borrowed a range."""
    out = []
    for s, background in ((p.meta, False), (p.data, True)):
        assert s is not None
        entry = entries.get(s.stream_id)
        if entry is None or entry["end"] <= s.next_offset:
            continue
        sid = s.stream_id

        def read(above: int, e: dict[str, Any] = entry, i: int = sid, later: bool = background) -> list[StreamRecord]:
            if later and served is not None:
                after_first_acks(p, e["end"], served)
            return load(store, e, i, above)

        parts.storage.borrow(s, entry["end"], read, background=background)
        out.append(sid)
    return out


#: at most this long the background read of a moved range waits for the take-over and the first new acks
READ_AFTER_S = 1.0


def after_first_acks(p: Partition, end: int, served: threading.Event, bound_s: float | None = None) -> None:
    """Wait until the take-over of `p` is done (`served`) and a record appended after the moved range (which ends
    at `end`) is acknowledged, at most READ_AFTER_S: reading a large range (a gigabyte is seconds of GETs that
    keep the WAL store busy) does not compete with the take-over's own writes and the first produces the new
    owner acknowledges, so the time of a move does not grow with the range. Reads of the range wait meanwhile."""
    deadline = time.monotonic() + (READ_AFTER_S if bound_s is None else bound_s)
    served.wait(max(0.0, deadline - time.monotonic()))
    while p.acked_end <= end and p.owned and time.monotonic() < deadline:
        time.sleep(0.005)


def borrowed_records(meta: MetadataClient, store: BlobStore, streams: dict[int, Stream]) -> list[StreamRecord]:
    """For a restart or a failover: the records of pending hand-offs above each open stream's end, to restore
    before the WAL records of the node that appended after them."""
    out: list[StreamRecord] = []
    for sid, entry in stream_entries(meta, refresh=True).items():
        s = streams.get(sid)
        if s is not None and entry["end"] > s.next_offset:
            out += load(store, entry, sid, s.next_offset)
    return out


def lent_by(meta: MetadataClient, node: int) -> dict[int, int]:
    """Stream id -> end of the segments `node` lent that are not committed yet."""
    out: dict[int, int] = {}
    for sid, entry in stream_entries(meta, refresh=True).items():
        for seg in entry["segments"]:
            if seg["node"] == node:
                out[sid] = max(out.get(sid, 0), seg["end"])
    return out


def kept_objects(meta: MetadataClient, nodes: list[int]) -> set[str]:
    """WAL object keys of `nodes` that a pending hand-off still reads from (its stream not committed past them)."""
    out = set()
    for sid, entry in stream_entries(meta, refresh=True).items():
        m = meta.image.streams.get(sid)
        for seg in entry["segments"]:
            if seg["node"] in nodes and m is not None and m.end_offset < seg["end"]:
                out |= {key for key, _lo, _hi in seg["objects"]}
    return out


def drop_committed(meta: MetadataClient) -> int:
    """Drop the docs whose streams are committed past their ends (or deleted). Returns how many."""
    dropped = 0
    for key, value in meta.kv_items(PREFIX, refresh=False).items():
        doc = json.loads(value)
        pending = False
        for sid, entry in doc.get("streams", {}).items():
            m = meta.image.streams.get(int(sid))
            if m is not None and m.end_offset < entry["end"]:
                pending = True
        if not pending and meta.kv_set_if({key: value}, key, None):
            dropped += 1
    return dropped


def read_objects(meta: MetadataClient) -> set[str]:
    """WAL object keys (of any node) that a pending hand-off still reads from."""
    out = set()
    for sid, entry in stream_entries(meta, refresh=True).items():
        m = meta.image.streams.get(sid)
        for seg in entry["segments"]:
            if m is not None and m.end_offset < seg["end"]:
                out |= {key for key, _lo, _hi in seg["objects"]}
    return out


def keep(meta: MetadataClient, node: int, keys: set[str]) -> None:
    """Record (before the failover of `node` deletes the rest of its WAL) the WAL objects it keeps for pending
    hand-offs, so that they are deleted once read (`sweep_kept`) although `node` may never come back."""
    if not keys:
        return
    key = f"{KEPT_PREFIX}{node}"
    for _ in range(10):
        old = meta.kv_get(key)
        objects = {} if old is None else json.loads(old)["objects"]
        new = {**dict.fromkeys(keys), **{k: v for k, v in objects.items() if k not in keys}}
        if meta.kv_set_if({key: old}, key, json.dumps({"objects": new}, sort_keys=True)):
            return
    raise RuntimeError(f"{key}: changed by others ten times in a row")


def sweep_kept(meta: MetadataClient, store: BlobStore, grace_s: float | None = None,
               now_ms: int | None = None) -> int:
    """Delete the kept WAL objects of failed-over nodes (`keep`) that no pending hand-off has read for `grace_s`
    (KEPT_GRACE_S); the time one stops being read is recorded at the first look that sees it. Returns how many
    were deleted. The objects are deleted before they are forgotten: a failure leaves them for the next look."""
    records = meta.kv_items(KEPT_PREFIX, refresh=False)
    if not records:
        return 0
    grace_ms = int(1000 * (KEPT_GRACE_S if grace_s is None else grace_s))
    now = int(time.time() * 1000) if now_ms is None else now_ms
    read = read_objects(meta)  # (caught up: the records again, as of the same image)
    records = meta.kv_items(KEPT_PREFIX, refresh=False)
    deleted = 0
    for key, value in records.items():
        objects: dict[str, int | None] = json.loads(value)["objects"]
        new: dict[str, int | None] = {}
        gone = []
        for obj, since in objects.items():
            if obj in read:
                new[obj] = None
            elif since is None:
                new[obj] = now
            elif now - since >= grace_ms:
                gone.append(obj)
            else:
                new[obj] = since
        if new == objects:
            continue
        if gone:
            store.delete(gone)
            deleted += len(gone)
            log.info("kept WAL objects of a failed-over node deleted: the moves that read them are uploaded", extra={
                "node_id": key[len(KEPT_PREFIX):], "objects": gone, "kept": len(new), "grace_s": grace_ms / 1000})
        meta.kv_set_if({key: value}, key, json.dumps({"objects": new}, sort_keys=True) if new else None)
    return deleted
