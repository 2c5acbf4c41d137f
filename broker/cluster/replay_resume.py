"""The failovers this node had begun and not finished when it stopped, finished by its restart (shared WAL).

A failover (cluster/failover.py) fences the dead node and records `failover_replays/<dead>` = {"by": this node,
"fenced_epoch": the epoch the fence gave it, "streams": the streams it takes} in one transaction, makes this node
the leader of the dead node's partitions and opens their streams here, and only then reads the dead node's WAL
into them, uploads, serves, deletes the WAL objects and the record. A node that stops in between (a crash, a
kill -9) and is restarted before its own lease expires is failed over by no one: its restart opens those
partitions again, as partitions it leads, at their committed end. Without the dead node's acknowledged records,
which only its WAL holds, those would be lost and their offsets given to new records.

So a restart reads, before its own WAL, the WALs of the nodes whose replay it recorded (and of the nodes those were
failing over when they died, as the failover does), and hands the records of the recorded streams to the restore
(`records`; the ranges of moves not committed yet come first, cluster/handoff_wal.py); once they are uploaded and
the restart knows where its index catch-up begins, it does what the failover had left (`finish`): it drops the
replay record (unless another survivor has begun a failover of that node since: then nothing more), keeps the WAL
objects a pending move still reads, deletes the rest, and records the failover's report, so that the dead node's
index rescue follows as after any failover.

Left to the failover check instead (which fences the node again and replays its WAL as any failover does): a dead
node that still leads partitions (this node stopped before it made itself their leader), and a record of an
earlier release (no streams named). A node the dead one was failing over that still leads partitions keeps its WAL
and its record for the same reason. A node whose WAL is replayed that registered again since (its epoch moved past
the fenced one) appends to the same WAL: its records are restored, its objects are not deleted (that node keeps
the records until they are committed and trims them itself, broker/streams/wal_holds.py).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from broker.cluster import handoff_wal
from broker.cluster.assignment import leaders
from broker.cluster.failover import REPLAYS_PREFIX, registered_again, taken_back
from broker.cluster.failover_history import record_failover
from broker.metadata import MetadataClient
from broker.objects.format import StreamRecord
from broker.partitions.partition_map import PartitionMap, now_ms
from broker.streams.object_wal import read_wal
from broker.streams.storage import decode_stream_record
from broker.streams.stream import Stream
from storage_tier import BlobStore

log = logging.getLogger("mqindex.broker.failover")


@dataclass
class _Found:
    key: str  # the replay record's key and value, as read
    value: str
    doc: dict[str, Any]
    nodes: list[int]  # the nodes whose WALs were read, the dead one last
    again: set[int]  # nodes of `nodes` that registered again since their fence
    spans: dict[int, list[tuple[int, int, str]]] = field(default_factory=dict)  # node -> its WAL objects read
    replayed: dict[int, int] = field(default_factory=dict)  # stream id -> records beyond its end when read
    leading: set[int] = field(default_factory=set)  # nodes of `nodes` that still lead partitions


class ResumedReplays:
    def __init__(self, parts: PartitionMap, meta: MetadataClient, wal_store: BlobStore, history_per_node: int) -> None:
        self.parts = parts
        self.meta = meta
        self.wal_store = wal_store
        self.history_per_node = history_per_node
        self._found: dict[int, _Found] = {}

    def records(self, streams: dict[int, Stream]) -> list[StreamRecord]:
        """The records, for the streams each unfinished failover of this node recorded, of the WALs it was to
        replay, in the failover's order (the nodes the dead one was failing over first)."""
        replays = {int(k[len(REPLAYS_PREFIX):]): (k, v)
                   for k, v in self.meta.kv_items(REPLAYS_PREFIX, refresh=True).items()}
        docs = {n: json.loads(v) for n, (_k, v) in replays.items()}
        leading = {lead.node for lead in leaders(self.meta).values()}
        out: list[StreamRecord] = []
        for dead in sorted(n for n, d in docs.items() if d.get("by") == self.parts.node_id):
            doc = docs[dead]
            if dead in leading or "streams" not in doc:
                continue  # the failover check takes it again (module doc)
            wanted = set(doc["streams"])
            inherited = sorted(n for n, d in docs.items() if d.get("by") == dead)
            again = {n for n in [*inherited, dead] if registered_again(self.meta, n, docs[n].get("fenced_epoch"))}
            found = _Found(*replays[dead], doc, [*inherited, dead], again)
            found.leading = {n for n in leading & set(inherited) if not taken_back(self.meta, n, docs[n])}
            for n in found.nodes:
                wal_records, report, spans = read_wal(self.wal_store, n)
                found.spans[n] = spans
                for w in wal_records:
                    rec = decode_stream_record(w.body)
                    if rec.stream_id not in wanted:
                        continue
                    s = streams.get(rec.stream_id)
                    if s is not None and rec.last_offset > s.next_offset:
                        found.replayed[rec.stream_id] = found.replayed.get(rec.stream_id, 0) + rec.count
                    out.append(rec)
                if report.stop_reason:
                    log.error("dead node's WAL replay stopped early", extra={"node_id": n,
                                                                             "reason": report.stop_reason})
            self._found[dead] = found
            log.warning("a failover this node began before it stopped: the dead node's WAL is replayed at the restart",
                        extra={"node_id": dead, "wals_of": found.nodes, "streams": len(wanted),
                               "objects": sum(len(v) for v in found.spans.values())})
        return out

    def finish(self, redispatched_from: dict[tuple[str, int], int]) -> list[dict[str, Any]]:
        """After the restored records are uploaded: the failovers' last steps (module doc). `redispatched_from`:
        (topic, partition) -> where this restart's index catch-up begins. Returns the reports. Records still
        cached (an upload put off by a full disk) leave the failovers as they are."""
        if not self._found:
            return []
        if self.parts.storage.cache.size:
            log.error("failovers begun before this node stopped not finished: the replayed records are not uploaded",
                      extra={"node_ids": sorted(self._found)})
            return []
        meta = self.meta
        reports = []
        for dead, found in sorted(self._found.items()):
            if not meta.kv_set_if({found.key: found.value}, found.key, None):
                log.info("failover taken over by another node since this one stopped", extra={"node_id": dead})
                continue
            cleared = [n for n in found.nodes if n not in found.leading]
            kept = handoff_wal.kept_objects(meta, found.nodes)  # a move's next owner still reads these
            spans = {k for n in cleared if n not in found.again for _, _, k in found.spans[n]}
            handoff_wal.keep(meta, dead, kept & spans)
            self.wal_store.delete(sorted(spans - kept))
            for n in cleared:
                if n != dead:
                    meta.kv_delete(f"{REPLAYS_PREFIX}{n}")
            wanted = set(found.doc["streams"])
            opened = [p for p in self.parts.owned() if p.data_stream in wanted]
            report = {
                "node": dead, "fenced_epoch": found.doc["fenced_epoch"], "by": self.parts.node_id,
                "at_ms": now_ms(), "wal": "shared", "partitions": [p.name for p in opened],
                "replayed_records": sum(found.replayed.get(p.data_stream, 0) for p in opened),
                "replayed_wals_of": found.nodes, "committed_ends": {p.name: p.acked_end for p in opened},
                "redispatched_from": [[p.topic.name, p.index, redispatched_from.get((p.topic.name, p.index), 0)]
                                      for p in opened],
                "finished_at_restart": True}
            record_failover(meta, report, self.history_per_node)
            log.info("failover finished at this node's restart: the dead node's WAL replayed", extra=report)
            reports.append(report)
        self._found.clear()
        return reports
