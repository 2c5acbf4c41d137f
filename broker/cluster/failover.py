"""Failover: the partitions of a node whose lease expired move to the survivors, nothing acknowledged lost.

The live node with the lowest id acts (every node runs the check; the metadata transaction of
`fence_node` lets only one survivor fence a given incarnation). For an expired node that still leads
partitions or holds streams open:
1. fence it: its node epoch rises and its open streams close, in one metadata transaction; its lease row
   moves to the new epoch, so a node that was only stalled finds itself fenced and stops acknowledging;
2. with a shared WAL (ObjectWal): read its WAL objects, open its partitions here at a higher epoch, put the
   acknowledged records beyond each stream's committed end in the cache and upload them, then delete its
   WAL objects; with a local WAL nothing of its WAL is readable: the partitions are opened at their
   committed end and the loss is reported (log, and the failover's report in the metadata KV, see
   cluster/failover_history.py: one per failover, the newest of each node kept);
3. re-dispatch the partitions to the index from their last state record's checkpoint (the dead node's
   index entries not yet uploaded went with it; duplicates with its published files are merged away by
   the cluster-wide lookup);
4. spread the partitions over the live nodes (the watcher hands the extra ones over);
5. rescue the rest of its index: the entries it held only locally (its index claims, see
   partitions/index_claims.py: partitions it had handed over, and the part of those it led below their
   re-dispatch point) are read back from the stream objects into a separate index, uploaded and published
   for every node (partitions/index_rescue.py). A node whose lease expired with claims but no partitions
   is taken over for this alone.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker.cluster import handoff_wal, leaving
from broker.cluster.assignment import leaders, set_leaders, spread
from broker.cluster.failover_history import (
    FAILOVER_HISTORY_PER_NODE,
    failover_reports,
    record_failover,
    report_key,
    update_failover,
)
from broker.cluster.membership import Membership
from broker.cluster.published_expiry import DEFAULT_INTERVAL_S, PublishedExpiry
from broker.cluster.published_merge import config_from_index
from broker.errors import Fenced
from broker.metadata import MetadataClient
from broker.metadata.image import OPENED
from broker.metadata.leases import EXPIRED
from broker.partitions.dispatcher import CatchUp
from broker.partitions.index_claims import claims_key, read_claims
from broker.partitions.index_rescue import publish_rescued, rebuild
from broker.partitions.partition import Partition
from broker.partitions.partition_map import PartitionMap, now_ms
from broker.partitions.retention import data_is_live
from broker.streams.object_wal import read_wal, wal_prefix
from broker.streams.storage import decode_stream_record
from broker.streams.wal_holds import EVERY_STREAM
from storage_tier import BlobStore, open_store

log = logging.getLogger("mqindex.broker.failover")

# replays/<dead node> = {"by": survivor}: a failover whose replay of the dead node's shared WAL is under way. A
# survivor that dies before it finished leaves it: whoever fails that survivor over replays both WALs, the dead
# node's first (the survivor never served those partitions, so its own WAL holds nothing of them before it)
REPLAYS_PREFIX = "failover_replays/"
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 5.0  # the waits before a pending failover is tried again (Failover._retries)
retry_clock = time.monotonic  # their clock (a test's own clock replaces it)


def replay_record(meta: MetadataClient, node: int, refresh: bool) -> dict[str, Any] | None:
    """The recorded replay of `node`'s shared WAL (REPLAYS_PREFIX), or None."""
    value = meta.kv_get(f"{REPLAYS_PREFIX}{node}", refresh=refresh)
    return None if value is None else dict(json.loads(value))


def registered_again(meta: MetadataClient, node: int, fenced_epoch: int | None) -> bool:
    """Whether `node` registered an incarnation after the fence that gave it `fenced_epoch` (unknown: a replay
    record of an earlier release, taken as not)."""
    n = meta.image.nodes.get(node)
    return fenced_epoch is not None and n is not None and n.epoch > int(fenced_epoch)


def replayed_elsewhere(meta: MetadataClient, node_id: int) -> frozenset[int] | None:
    """The streams another node's failover of `node_id` is replaying from that node's shared WAL: it recorded the
    replay and has not finished it (None: no such failover). A restart of `node_id` keeps their records in its WAL
    until they are committed (broker/streams/wal_holds.py), for the survivor has yet to read them. A record of an
    earlier release names no streams: every stream is taken (EVERY_STREAM)."""
    doc = replay_record(meta, node_id, refresh=True)
    if doc is None or doc.get("by") == node_id:
        return None
    return EVERY_STREAM if doc.get("streams") is None else frozenset(int(s) for s in doc["streams"])


def taken_back(meta: MetadataClient, node: int, doc: dict[str, Any]) -> bool:
    """Whether nothing is left for the replay of `node` that `doc` (its replay record) records: `node` registered
    again since that fence, and every stream the replay takes is open again or deleted. A stream is opened after
    the fence only by a node that puts the dead node's acknowledged records in it first (its own restart, from its
    WAL; a survivor, from the replay); a move's target waits while the record exists (handoff.replay_pending). A
    record of an earlier release (no fenced epoch, no streams) is never taken as done."""
    streams = doc.get("streams")
    if streams is None or not registered_again(meta, node, doc.get("fenced_epoch")):
        return False
    return all((s := meta.image.streams.get(int(sid))) is None or s.state == OPENED for sid in streams)


class Failover:
    def __init__(self, parts: PartitionMap, membership: Membership, wal_store: BlobStore | None,
                 catch_up: Callable[[CatchUp], None], interval_s: float = 0.5, index_store: str | None = None,
                 rescue_dir: Path | None = None, history_per_node: int = FAILOVER_HISTORY_PER_NODE,
                 index_retention_ms: int | None = None, index_config: Any = None) -> None:
        self.parts = parts
        self.index_config = index_config  # the node's index settings: cluster_merge_* (published_merge.py)
        self.index_retention_ms = index_retention_ms  # --index-retention-ms: published files expire by it too
        self.expiry: PublishedExpiry | None = None  # opened at the first look as the failover leader
        self._expiry_thread: threading.Thread | None = None  # its run under way (`_expire_published`)
        self._expiry_lock = threading.Lock()
        self._stopped = False
        self.history_per_node = history_per_node  # failover reports kept per node id
        self.index_store = index_store  # URL of the store rescued index files go to (the nodes' index store)
        self.rescue_dir = rescue_dir  # local scratch space of a rescue
        self.membership = membership
        self.wal_store = wal_store  # where every node's shared WAL lives (None: local WALs)
        self.catch_up = catch_up
        self.interval_s = interval_s
        self._last = 0.0
        self._rescuing: set[int] = set()  # dead nodes whose index rescue runs now
        self._rescue_lock = threading.Lock()  # one rescue at a time
        self.done: list[dict[str, Any]] = []
        # dead node -> (its fenced epoch, the partitions claimed here for it, the live nodes, when it began): a
        # failover not finished yet; one interrupted before its replay finished stays (`_resume_pending`)
        self._pending: dict[int, tuple[int, list[Partition], list[int], float]] = {}
        # dead node -> (failed tries of its pending failover, when the next may begin): the WAL is read again after
        # RETRY_FIRST_S, doubling up to RETRY_MAX_S, half a default lease (at every look, a WAL that fails for good
        # was read twice a second); the partitions wait unserved meanwhile, so the cap stays short
        self._retries: dict[int, tuple[int, float]] = {}
        self.clock: Callable[[], float] = retry_clock  # the retries' clock

    def check(self) -> None:
        """Called on every look of the assignment watcher; acts at most every `interval_s`."""
        if time.monotonic() - self._last < self.interval_s:
            return
        self._last = time.monotonic()
        self._resume_pending()
        if not self.membership.steady():  # its own lease lapsed lately: the others' may have for the same reason
            return
        me = self.parts.node_id
        nodes = self.membership.nodes()
        alive = sorted(n.node_id for n in nodes if n.state == "alive")
        if not alive or alive[0] != me:
            return
        self._expire_published(set(alive))
        lead = leaders(self.parts.meta, refresh=True)
        for n in nodes:
            # a failover of it pending here (its replay interrupted) is taken up by `_resume_pending` alone: another
            # one, begun for its index claims, took no partition, deleted its WAL and left the pending ones unserved
            if n.state != EXPIRED or n.node_id == me or n.node_id in self._pending:
                continue
            led = [p for p in self.parts.all() if (w := lead.get((p.topic.topic_id, p.index))) and w.node == n.node_id]
            holds = any(s.state == OPENED and s.owner == n.node_id for s in self.parts.meta.image.streams.values())
            if not led and not holds and self._replayed_by_another(n.node_id, alive):
                continue  # a live survivor took its partitions and replays its WAL (pending there)
            claims = (self.parts.meta.kv_get(claims_key(n.node_id), refresh=False) is not None
                      and n.node_id not in self._rescuing)
            if not led and not holds and claims and self.rescue_dir is not None:
                done = self._failed_over(n.node_id)
                if done is not None:  # its failover is done; the survivor that did it died before its rescue did
                    self._resume_rescue(n.node_id, done)
                    continue
            if led or holds or (claims and self.rescue_dir is not None):
                self.take_over(n.node_id, led, alive)

    def _replayed_by_another(self, node: int, alive: list[int]) -> bool:
        """Whether another live node recorded a replay of `node`'s WAL that it has not finished (an interrupted one
        stays pending there and is retried by that node alone). Asked for a node that leads and holds nothing (that
        node made itself their leader): failing it over again here, for its index claims, would take no partition
        and delete the WAL that node still has to replay."""
        if self.wal_store is None:
            return False
        doc = replay_record(self.parts.meta, node, refresh=False)
        by = None if doc is None else doc.get("by")
        return by is not None and by != self.parts.node_id and by in alive

    def _expire_published(self, alive: set[int]) -> None:
        """Retention of the files of departed nodes and of index rescues, and the merge of published files
        (cluster/published_expiry.py), when due, on a thread of its own, one run at a time. A run lists, reads,
        writes and deletes objects (a store client opened at the first); the assignment watcher's look that calls
        this also hands partitions over and takes them, and a move or a failover must not wait behind it (a move's
        hand-off waited up to half a second)."""
        if self.index_store is None:
            return
        with self._expiry_lock:
            running = self._expiry_thread is not None and self._expiry_thread.is_alive()
            if self._stopped or running or (self.expiry is not None and not self.expiry.due()):
                return
            self._expiry_thread = threading.Thread(target=self._run_expiry, args=(alive,), name="published-expiry",
                                                   daemon=True)
            self._expiry_thread.start()

    def _run_expiry(self, alive: set[int]) -> None:
        try:
            if self.expiry is None:
                parts = self.parts
                self.expiry = PublishedExpiry(
                    parts.meta, open_store(self.index_store), lambda t, q, off: data_is_live(parts, t, q, off),
                    self.index_retention_ms, now_ms,
                    interval_s=getattr(self.index_config, "cluster_merge_interval_s", DEFAULT_INTERVAL_S),
                    merge_config=config_from_index(self.index_config))
            self.expiry.maybe_run(alive)
        except Exception as exc:  # noqa: BLE001 - the next look starts another run
            log.warning("expiry of published index files failed", extra={"error": f"{type(exc).__name__}: {exc}",
                                                                         "store": self.index_store})

    def stop(self) -> None:
        """No new expiry run; the one under way is waited for (it uses the metadata client the node closes)."""
        with self._expiry_lock:
            self._stopped = True
            thread = self._expiry_thread
        if thread is not None:
            thread.join()

    def take_over(self, dead: int, led: list[Partition], alive: list[int]) -> dict[str, Any]:
        started = time.monotonic()
        meta = self.parts.meta
        meta.catch_up()
        node = meta.image.nodes.get(dead)
        if node is None:
            return {}
        if not self._still_expired(dead):
            return {}
        # with a shared WAL, the replay under way is recorded in the fencing transaction itself (REPLAYS_PREFIX),
        # with the epoch the fence gives the node and the streams it takes (what a restart of this node that finds
        # the replay unfinished puts the node's WAL records in: cluster/replay_resume.py)
        taken = {sid for sid, st in meta.image.streams.items() if st.state == OPENED and st.owner == dead}
        taken |= {sid for p in led for sid in (p.meta_stream, p.data_stream)}
        replay = ({f"{REPLAYS_PREFIX}{dead}": json.dumps({"by": self.parts.node_id, "fenced_epoch": node.epoch + 1,
                                                          "streams": sorted(taken)})}
                  if self.wal_store is not None else None)
        try:
            new_epoch, closed = meta.fence_node(dead, node.epoch, kv_put=replay)
        except Fenced as exc:
            log.info("failover of node done elsewhere", extra={"node_id": dead, "reason": str(exc)})
            return {}
        self.membership.leases.fence(dead, new_epoch)
        sids = set(closed)
        parts = [p for p in self.parts.all() if p.data_stream in sids or p.meta_stream in sids or p in led]
        set_leaders(meta, {(p.topic.topic_id, p.index): self.parts.node_id for p in parts})
        self.parts.claim(parts, serve=False)  # not writable until the dead node's acknowledged records are in
        self._pending[dead] = (new_epoch, parts, alive, started)
        return self._try_finish(dead)

    def _failed_over(self, dead: int) -> dict[str, Any] | None:
        """The report of the failover that fenced node `dead`'s current incarnation, when one was recorded: its
        node epoch is the fenced epoch then, and no later incarnation registered."""
        node = self.parts.meta.image.nodes.get(dead)
        if node is None:
            return None
        doc = self.parts.meta.kv_get(report_key({"node": dead, "fenced_epoch": node.epoch}), refresh=False)
        return None if doc is None else dict(json.loads(doc))

    def _resume_rescue(self, dead: int, report: dict[str, Any]) -> None:
        """Rebuild the index entries of a failed-over node whose survivor died before it had (its claims are still
        recorded), under that failover's report. The node is not fenced again: a second fence recorded a second
        failover of one death, with no partition in it."""
        log.info("failover: resuming the index rescue its survivor did not finish",
                 extra={"node_id": dead, "fenced_epoch": report["fenced_epoch"], "by": report.get("by")})
        redispatch_from = {(str(t), int(q)): int(start) for t, q, start in report.get("redispatched_from", [])}
        self._start_rescue(dead, int(report["fenced_epoch"]), redispatch_from, report)

    def _start_rescue(self, dead: int, epoch: int, redispatch_from: dict[tuple[str, int], int],
                      report: dict[str, Any]) -> None:
        """`_rescue` on a thread of its own (the watcher's look does not wait for it); `dead` is left alone by the
        looks meanwhile (`_rescuing`)."""
        self._rescuing.add(dead)
        threading.Thread(target=self._rescue, args=(dead, epoch, redispatch_from, report),
                         name=f"index-rescue-{dead}", daemon=True).start()

    def _still_expired(self, dead: int) -> bool:
        """Whether node `dead`'s lease is still expired, asked again just before it is fenced: the verdict that
        started this failover is as old as the looks made since (the published files' expiry, the leaders, the
        metadata's catch-up), and a node whose renewal came late but came meanwhile is alive and serving."""
        lease = next((n for n in self.membership.nodes() if n.node_id == dead), None)
        if lease is None or lease.ended:  # shut down, or already expired by a survivor: it renews no more
            return True
        # the lease ended now, if its row is still the version judged expired: a renewal sent before this and
        # applied after it would otherwise let the node go on while its partitions are taken (leases.expire_if)
        if lease.state != EXPIRED or not self.membership.leases.expire_if(dead, lease.epoch, lease.expires_ms):
            log.warning("failover abandoned: the node renewed its lease", extra={"node_id": dead,
                                                                                  "node_epoch": lease.epoch})
            return False
        return True

    def _resume_pending(self) -> None:
        """Take up the failovers interrupted after their partitions were opened here, before the dead node's
        acknowledged records were replayed into them (a store or metadata error on the way): those partitions
        are served only once that is done (the watcher leaves partitions being replayed alone). Each is tried
        again once its wait is over (`_retries`)."""
        for dead in list(self._pending):
            if self.clock() >= self._retries.get(dead, (0, 0.0))[1]:
                self._try_finish(dead)

    def _try_finish(self, dead: int) -> dict[str, Any]:
        """Finish the pending failover of `dead` (its report), or leave it pending for the next check ({})."""
        epoch, parts, alive, started = self._pending[dead]
        opened = [p for p in parts if p.data is not None and p.meta is not None and not p.owned]
        try:
            report = self._finish(dead, epoch, opened, alive, started)
        except Exception as exc:  # noqa: BLE001 - the partitions wait for the replay: retried after a wait
            tries = self._retries.get(dead, (0, 0.0))[0] + 1
            wait_s = min(RETRY_FIRST_S * 2 ** (tries - 1), RETRY_MAX_S)
            self._retries[dead] = (tries, self.clock() + wait_s)
            log.error("failover interrupted: the dead node's partitions stay unserved until its WAL is replayed; "
                      "retried", extra={"node_id": dead, "partitions": [p.name for p in opened], "tries": tries,
                                        "retry_in_s": wait_s, "error": f"{type(exc).__name__}: {exc}"})
            return {}
        del self._pending[dead]
        self._retries.pop(dead, None)
        return report

    def _finish(self, dead: int, new_epoch: int, opened: list[Partition], alive: list[int],
                started: float) -> dict[str, Any]:
        """Steps 2-5 of the module doc for the partitions opened here. Safe to run again after a failure: the
        WAL objects are deleted last, records already restored are skipped, the re-dispatch is idempotent."""
        meta = self.parts.meta
        records = []
        replayed = 0
        shared = self.wal_store is not None
        spans: list[tuple[int, int, str]] = []
        spans_of: dict[int, list[tuple[int, int, str]]] = {}
        inherited: list[int] = []
        # the replay records of the nodes the dead one was failing over when it died, and the dead one's own
        replay_docs: dict[int, dict[str, Any]] = {dead: {"fenced_epoch": new_epoch}}
        if shared:
            assert self.wal_store is not None
            # the WALs of nodes the dead one was failing over when it died, before its own (REPLAYS_PREFIX)
            for k, v in meta.kv_items(REPLAYS_PREFIX).items():
                doc = json.loads(v)
                if doc.get("by") == dead:
                    replay_docs[int(k[len(REPLAYS_PREFIX):])] = doc
            inherited = sorted(n for n in replay_docs if n != dead)
            for node in [*inherited, dead]:
                wal_records, report, node_spans = read_wal(self.wal_store, node)
                spans += node_spans
                spans_of[node] = node_spans
                records += [decode_stream_record(w.body) for w in wal_records]
                if report.stop_reason:
                    log.error("dead node's WAL replay stopped early", extra={"node_id": node,
                                                                             "reason": report.stop_reason})
            # records of a move not committed yet lie in the WALs of the nodes the partition came from, below
            # what the dead node appended (cluster/handoff_wal.py)
            streams = {s.stream_id: s for p in opened for s in p.streams}
            records = handoff_wal.borrowed_records(meta, self.wal_store, streams) + records
            restored = self.parts.storage.restore_records(records)
            replayed = sum(restored.get(p.data_stream, 0) for p in opened)
        self.parts.storage.force_upload()
        self.parts.load_states(opened, served=False)
        redispatch_from: dict[tuple[str, int], int] = {}
        for p in opened:
            ck = p.state.index_checkpoint
            start = max(-1 if ck is None else ck, -1) + 1
            own = self.parts.index_checkpoint(p)
            start = max(start if own is None else max(start, own + 1), self.parts.start_offset(p))
            redispatch_from[(p.topic.name, p.index)] = start
            self.catch_up(CatchUp(p.topic.name, p.index, start, p.acked_end))
        # served only now: a live entry dispatched before the catch-up would raise the index's checkpoint
        # past the catch-up range, and the index would drop that range as already indexed
        self.parts.serve(opened)
        self.parts.write_states(opened, clean=False)
        # a node the dead one was failing over that still leads partitions (it died before it made itself their
        # leader) keeps its WAL and its replay record: the failover check takes that node over next and replays it.
        # Unless that node registered again and every stream of its replay is open again (`taken_back`: its restart
        # put its WAL's records in the partitions it leads): no failover of it comes while it lives, and the record,
        # kept, held the balancer and every move of its partitions back for good (handoff.replay_pending)
        leading = {w.node for w in leaders(meta, refresh=True).values()} & set(inherited)
        leading = {n for n in leading if not taken_back(meta, n, replay_docs[n])}
        cleared = [n for n in [*inherited, dead] if n not in leading]
        if shared and spans:
            assert self.wal_store is not None
            # a node that registered again since its fence appends to the same WAL (its objects are the new
            # incarnation's too) and keeps the records read here until they are committed
            # (broker/streams/wal_holds.py): its objects are trimmed by that node, not deleted here. An inherited
            # replay record of an earlier release has no fenced epoch: its node is taken as not registered again
            back = {n for n in cleared if registered_again(meta, n, replay_docs[n].get("fenced_epoch"))}
            if back:
                log.info("failover: the node registered again meanwhile; its WAL objects are left to it",
                         extra={"node_id": dead, "registered_again": sorted(back)})
            spans = [sp for n in cleared if n not in back for sp in spans_of.get(n, [])]
            kept = handoff_wal.kept_objects(meta, [*inherited, dead])  # a move's next owner still reads these
            handoff_wal.keep(meta, dead, kept & {k for _, _, k in spans})  # deleted once read (sweep_kept)
            self.wal_store.delete([k for _, _, k in spans if k not in kept])
        for node in cleared if shared else []:
            meta.kv_delete(f"{REPLAYS_PREFIX}{node}")
        report_doc = {
            "node": dead, "fenced_epoch": new_epoch, "by": self.parts.node_id, "at_ms": now_ms(),
            "wal": "shared" if shared else "local", "partitions": [p.name for p in opened],
            "replayed_records": replayed, "replayed_wals_of": [*inherited, dead] if shared else [],
            # with a local WAL the records it acknowledged after these committed ends are lost
            "committed_ends": {p.name: p.acked_end for p in opened},
            # where the catch-up above re-dispatched each partition from: a rescue resumed elsewhere stops there
            "redispatched_from": [[t, q, start] for (t, q), start in sorted(redispatch_from.items())],
            "seconds": round(time.monotonic() - started, 3)}
        record_failover(meta, report_doc, self.history_per_node)
        if shared:
            log.info("failover: node fenced, its WAL replayed", extra=report_doc)
        else:
            log.error("failover: node fenced; its WAL was local, so records it acknowledged but had not "
                      "uploaded are lost", extra=report_doc)
        self.done.append(report_doc)
        # spread over the live nodes not stopping (broker/cluster/leaving.py): a stopping node would keep them unserved
        stay = leaving.staying(meta, self.membership.alive(0))
        alive = [n for n in alive if n in stay or n == self.parts.node_id]
        others = [n for n in alive if n != self.parts.node_id]
        if others and opened:
            load: dict[int, int] = {}
            for w in leaders(meta, refresh=True).values():
                load[w.node] = load.get(w.node, 0) + 1
            targets = spread(len(opened), alive, {n: c for n, c in load.items() if n in alive})
            moves = {(p.topic.topic_id, p.index): t for p, t in zip(opened, targets, strict=True)
                     if t != self.parts.node_id}
            if moves:
                set_leaders(meta, moves)
        if self.rescue_dir is not None:
            # off the watcher's thread: the hand-offs of the spread above and the next failover do not wait
            self._start_rescue(dead, new_epoch, redispatch_from, report_doc)
        return report_doc

    def _rescue(self, dead: int, epoch: int, redispatch_from: dict[tuple[str, int], int],
                report_doc: dict[str, Any]) -> None:
        try:
            with self._rescue_lock:
                try:
                    report_doc["index_rescue"] = self.rescue_index(dead, epoch, redispatch_from)
                except Exception as exc:  # noqa: BLE001 - its claims stay recorded: the next look tries again
                    log.exception("failover: rebuilding the dead node's local index entries failed",
                                  extra={"node_id": dead})
                    report_doc["index_rescue"] = {"error": f"{type(exc).__name__}: {exc}"}
                update_failover(self.parts.meta, report_doc)
        finally:
            self._rescuing.discard(dead)

    def rescue_index(self, dead: int, epoch: int, redispatch_from: dict[tuple[str, int], int]) -> dict[str, Any]:
        """Rebuild the index entries the dead node held only locally (its claims) below what the re-dispatch
        above covers, as index files every node reads."""
        assert self.rescue_dir is not None
        started = time.monotonic()
        ranges = []
        for c in read_claims(self.parts.meta, dead):
            try:
                p = self.parts.get(c.topic, c.partition)
            except LookupError:
                continue  # the topic is gone
            lo = max(c.lo, self.parts.start_offset(p))
            if (c.topic, c.partition) in redispatch_from:
                end = redispatch_from[(c.topic, c.partition)]
            elif c.last is not None:
                end = c.last + 1
            else:
                end = self.parts.bounds(p)[1]
            if c.last is not None:
                end = min(end, c.last + 1)
            if end > lo:
                ranges.append(CatchUp(c.topic, c.partition, lo, end))
        name = f"{dead}.{epoch}"
        if not ranges:
            self.parts.meta.kv_delete(claims_key(dead))
            return {"ranges": [], "entries": 0, "files": 0, "seconds": round(time.monotonic() - started, 3)}
        files, entries = rebuild(self.parts, ranges, self.rescue_dir / name, self.index_store,
                                 f"index-rescue-{name}/", now_ms)
        publish_rescued(self.parts.meta, name, files, claims_key(dead))
        doc = {"ranges": [[c.topic, c.partition, c.start, c.end] for c in ranges], "entries": entries,
               "files": len(files), "seconds": round(time.monotonic() - started, 3)}
        log.info("failover: index entries the dead node held only locally rebuilt", extra={"node_id": dead, **doc})
        return doc


__all__ = ["Failover", "failover_reports", "wal_prefix"]
