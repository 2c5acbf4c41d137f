"""The failovers this node had begun and not finished when it stopped, finished by its restart (shared WAL).

A failover (cluster/failover.py) fences the dead node and records `failover_replays/<dead>` = {"by": this node} in
one transaction, makes this node the leader of the dead node's partitions and opens their streams here, and only
then reads the dead node's WAL into them, uploads, serves, deletes the WAL objects and the record. A node that
stops in between (a crash, a kill -9) and is restarted before its own lease expires is failed over by no one: its
restart opens those partitions again, as the partitions it leads, at their committed end. Without the dead node's
acknowledged records, which only its WAL holds, those would be lost and their offsets given to new records.

So a restart reads, before its own WAL, the WALs of the nodes whose replay it recorded (and of the nodes those were
failing over when they died, as the failover does), and puts their records beyond each stream's committed end in
the streams it opened (`records`); once they are uploaded, it does what the failover had left: keeps the WAL
objects a pending move still reads, deletes the rest, drops the replay record if it is still this node's, and
records the failover's report (`finish`), so that the dead node's index rescue follows as after any failover. A
dead node that still leads partitions (this node stopped before it made itself their leader) is left to the
failover check, which fences it again and replays its WAL as any failover does.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from broker.cluster import handoff_wal
from broker.cluster.assignment import leaders
from broker.cluster.failover import REPLAYS_PREFIX
from broker.cluster.failover_history import record_failover
from broker.metadata import MetadataClient
from broker.objects.format import StreamRecord
from broker.partitions.partition_map import PartitionMap, now_ms
from broker.streams.object_wal import read_wal
from broker.streams.storage import decode_stream_record
from broker.streams.stream import Stream
from storage_tier import BlobStore

log = logging.getLogger("mqindex.broker.failover")


class ResumedReplays:
    def __init__(self, parts: PartitionMap, meta: MetadataClient, wal_store: BlobStore, history_per_node: int) -> None:
        self.parts = parts
        self.meta = meta
        self.wal_store = wal_store
        self.history_per_node = history_per_node
        #: dead node -> (its replay record's key and value, the nodes whose WALs were read for it, their objects)
        self._found: dict[int, tuple[str, str, list[int], list[tuple[int, int, str]]]] = {}
        #: dead node -> stream id open here -> records of its WALs beyond the stream's end when they were read
        self._replayed: dict[int, dict[int, int]] = {}

    def records(self, streams: dict[int, Stream]) -> list[StreamRecord]:
        """The records of the WALs of the nodes whose failover this node's previous incarnation began, in the order
        the failover restores them (the nodes the dead one was failing over first); the caller keeps those of the
        `streams` open here beyond their ends."""
        replays = {int(k[len(REPLAYS_PREFIX):]): (k, v)
                   for k, v in self.meta.kv_items(REPLAYS_PREFIX, refresh=True).items()}
        mine = sorted(n for n, (_k, v) in replays.items() if json.loads(v).get("by") == self.parts.node_id)
        leading = {lead.node for lead in leaders(self.meta).values()}
        out: list[StreamRecord] = []
        for dead in mine:
            inherited = sorted(n for n, (_k, v) in replays.items() if json.loads(v).get("by") == dead)
            if leading & {dead, *inherited}:
                # stopped before it made itself the leader of the dead node's partitions: the dead node still leads
                # them, and the failover check fences it again and replays its WAL as any failover
                continue
            spans: list[tuple[int, int, str]] = []
            replayed: dict[int, int] = {}
            for node in [*inherited, dead]:
                wal_records, report, node_spans = read_wal(self.wal_store, node)
                spans += node_spans
                for w in wal_records:
                    rec = decode_stream_record(w.body)
                    s = streams.get(rec.stream_id)
                    if s is not None and rec.last_offset > s.next_offset:
                        replayed[rec.stream_id] = replayed.get(rec.stream_id, 0) + rec.count
                    out.append(rec)
                if report.stop_reason:
                    log.error("dead node's WAL replay stopped early", extra={"node_id": node,
                                                                             "reason": report.stop_reason})
            key, value = replays[dead]
            self._found[dead] = (key, value, [*inherited, dead], spans)
            self._replayed[dead] = replayed
            log.warning("a failover this node began before it stopped: the dead node's WAL is replayed at the restart",
                        extra={"node_id": dead, "wals_of": [*inherited, dead], "objects": len(spans),
                               "streams": sorted(replayed)})
        return out

    def finish(self) -> list[dict[str, Any]]:
        """After the restored records are uploaded: the failovers' last steps (module doc). Returns their reports.
        Records still cached (an upload put off by a full disk) leave the failovers as they are."""
        if not self._found:
            return []
        if self.parts.storage.cache.size:
            log.error("failovers begun before this node stopped not finished: the replayed records are not uploaded",
                      extra={"node_ids": sorted(self._found)})
            return []
        meta = self.meta
        reports = []
        for dead, (key, value, nodes, spans) in sorted(self._found.items()):
            kept = handoff_wal.kept_objects(meta, nodes)  # a move's next owner still reads these
            handoff_wal.keep(meta, dead, kept & {k for _, _, k in spans})
            self.wal_store.delete([k for _, _, k in spans if k not in kept])
            for node in nodes[:-1]:
                meta.kv_delete(f"{REPLAYS_PREFIX}{node}")
            meta.kv_set_if({key: value}, key, None)  # unless another survivor has begun a failover of it since
            replayed = self._replayed[dead]
            opened = [p for p in self.parts.owned() if p.data_stream in replayed or p.meta_stream in replayed]
            node = meta.image.nodes.get(dead)
            report = {
                "node": dead, "fenced_epoch": 0 if node is None else node.epoch, "by": self.parts.node_id,
                "at_ms": now_ms(), "wal": "shared", "partitions": [p.name for p in opened],
                "replayed_records": sum(replayed.get(p.data_stream, 0) for p in opened), "replayed_wals_of": nodes,
                "committed_ends": {p.name: p.acked_end for p in opened},
                "redispatched_from": [[p.topic.name, p.index, self._redispatched_from(p)] for p in opened],
                "finished_at_restart": True}
            record_failover(meta, report, self.history_per_node)
            log.info("failover finished at this node's restart: the dead node's WAL replayed", extra=report)
            reports.append(report)
        self._found.clear()
        return reports

    def _redispatched_from(self, p: Any) -> int:
        """Where this restart's catch-up re-dispatches the partition from (partitions/index_link.catch_up_ranges)."""
        ck = self.parts.index_checkpoint(p)
        return max(0 if ck is None else ck + 1, self.parts.start_offset(p))
