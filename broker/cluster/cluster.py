"""Cluster: this node's place among the others, composed from leases, leaders, the watcher and peers.

    membership = Membership(LeaseTable(metadata_url), node_id, node_epoch, http, kafka, lease_ms)
    membership.start()                  # lease registered (the node is alive for the others)
    cluster = Cluster(parts, meta, membership, token=...)
    cluster.claim_at_open(every)        # partitions assigned here, unassigned, or left open by a crash here
    cluster.start(index, dispatcher)    # the watcher, key lookups across nodes
    cluster.create_topic / delete_topic / reassign / rebalance_plan / nodes / drain / stop

A node leads exactly the partitions the metadata assigns to it (broker/cluster/assignment.py); the
AssignmentWatcher carries out changes (broker/cluster/handoff.py); ClusterIndex answers key lookups over
every node's index; requests for a partition led elsewhere are answered with NotLeader naming the leader. The
Balancer (broker/cluster/balancer.py) reports this node's load and, on the lowest live node, moves partitions
off an overloaded node; every move is recorded (broker/cluster/moves.py).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from broker.cluster import handoff_wal, leaving
from broker.cluster.assignment import (
    PREFIX,
    Move,
    leader_items,
    leaders,
    next_leaders,
    plan_rebalance,
    set_leaders,
    spread,
)
from broker.cluster.balance_plan import plan_by_load
from broker.cluster.balancer import BalanceConfig, Balancer
from broker.cluster.cluster_index import ClusterIndex, index_file_rows, publish_files
from broker.cluster.failover import Failover
from broker.cluster.failover_history import FAILOVER_HISTORY_PER_NODE
from broker.cluster.handoff import hand_off
from broker.cluster.load_report import partition_scores, read_reports
from broker.cluster.membership import LENT_WAL_RANGES, Membership
from broker.cluster.moves import moves as recorded_moves
from broker.cluster.moves import record_move
from broker.cluster.peers import Peers
from broker.cluster.replay_resume import ResumedReplays
from broker.cluster.watcher import AssignmentWatcher
from broker.errors import NodeNotLive
from broker.metadata import MetadataClient
from broker.metadata.image import OPENED
from broker.objects.format import StreamRecord
from broker.partitions.client_messages import OutMessage
from broker.partitions.dispatcher import Dispatcher
from broker.partitions.partition import Partition
from broker.partitions.partition_map import PartitionMap, now_ms
from broker.partitions.topics import TopicInfo
from broker.streams.stream import Stream
from index_file import IndexHit
from storage_tier import StorageUnavailable

log = logging.getLogger("mqindex.broker.cluster")


class Cluster:
    def __init__(self, parts: PartitionMap, meta: MetadataClient, membership: Membership, *, token: str | None = None,
                 watch_interval_s: float = 0.1, wal_store: Any = None,
                 failover_history: int = FAILOVER_HISTORY_PER_NODE, balance: BalanceConfig | None = None) -> None:
        """membership: this node's lease, started already: a node takes it right after it registers its new epoch
        in the metadata, before it reads its WAL (which can take longer than a lease; until then the lease row
        shows the previous incarnation's epoch, expired, and a survivor would fence the new incarnation)."""
        self.parts = parts
        self.meta = meta
        self.node_id = membership.node_id
        self.watch_interval_s = watch_interval_s
        self.wal_store = wal_store  # the shared WAL's store (None: local WALs)
        self.failover_history = failover_history  # failover reports kept per node id
        self.failover: Failover | None = None
        self.membership = membership
        membership.on_fenced = self._lease_lost
        membership.unfit = self._unfit
        parts.storage.ack_checks.append(membership.check_lease)  # no acknowledgement without the lease
        self.peers = Peers(token)
        self.index: ClusterIndex | None = None
        self.watcher: AssignmentWatcher | None = None
        parts.leader_elsewhere = self.leader_elsewhere
        parts.remote_message = self.remote_message
        self._dropped_at = 0.0
        self.balancer = Balancer(parts, meta, membership, balance or BalanceConfig())  # cluster/balancer.py
        # failovers this node began and had not finished when it stopped (cluster/replay_resume.py)
        self.resumed = ResumedReplays(parts, meta, wal_store, failover_history) if wal_store is not None else None
        if wal_store is not None:  # moves over the shared WAL (cluster/handoff_wal.py): before this node's WAL
            parts.storage.before_restore = self._records_before_own_wal
            parts.storage.lend(handoff_wal.lent_by(meta, self.node_id))  # is restored, keep what it lent

    # -- opening ----------------------------------------------------------------------------------
    def _records_before_own_wal(self, streams: dict[int, Stream]) -> list[StreamRecord]:
        """What a restart restores into the streams it opened before its own WAL's records: the ranges of moves not
        committed yet, and the WALs of the nodes whose failover it had begun."""
        assert self.wal_store is not None and self.resumed is not None
        return handoff_wal.borrowed_records(self.meta, self.wal_store, streams) + self.resumed.records(streams)

    def finish_resumed_replays(self, redispatched_from: dict[tuple[str, int], int]) -> None:
        """Once the restored records are uploaded: the rest of the failovers this node had begun (replay_resume.py);
        `redispatched_from`: where the restart's index catch-up begins, per (topic, partition). A failure is logged:
        the records are uploaded, and a replay record left behind has the failover check take the node again."""
        if self.resumed is None:
            return
        try:
            self.resumed.finish(redispatched_from)
        except Exception as exc:  # noqa: BLE001 - the node serves; the failover check takes the node again
            log.error("failovers begun before this node stopped not finished", extra={
                "error": f"{type(exc).__name__}: {exc}"})

    def claim_at_open(self, every: list[Partition]) -> None:
        """Open the partitions assigned here, the unassigned ones nobody holds (recorded as led here), and
        the ones this node's previous incarnation left open (so their WAL records are uploaded; the watcher
        hands them to their leader)."""
        lead = leaders(self.meta, refresh=True)
        mine = []
        for p in every:
            want = lead.get((p.topic.topic_id, p.index))
            ds = self.meta.get_stream(p.data_stream, refresh=False)
            left_open = ds.state == OPENED and ds.owner == self.node_id
            if want is None or want.node == self.node_id or left_open:
                mine.append(p)
        self.parts.claim(mine)
        new = {(p.topic.topic_id, p.index): self.node_id for p in mine
               if p.owned and (p.topic.topic_id, p.index) not in lead}
        if new:
            set_leaders(self.meta, new)

    def start(self, index: Any, dispatcher: Dispatcher) -> None:
        def sync_index() -> None:
            dispatcher.wait_idle(60.0)

        config = getattr(index, "config", None)
        self.index = ClusterIndex(self.node_id, index.query, self.membership, self.peers, self.meta,
                                  getattr(index, "store", None),
                                  filter_cache_bytes=getattr(config, "filter_cache_bytes", None))
        root = getattr(getattr(index, "folders", None), "root", None)
        index_url = getattr(getattr(index, "config", None), "store_url", None)  # a rescue opens its own store
        self.failover = Failover(self.parts, self.membership, self.wal_store, dispatcher.enqueue_catch_up,
                                 index_store=index_url, index_retention_ms=getattr(config, "retention_ms", None),
                                 index_config=config,
                                 history_per_node=self.failover_history,
                                 rescue_dir=None if root is None or index_url is None
                                 else Path(root).parent / "index-rescue")
        self.watcher = AssignmentWatcher(self.parts, sync_index, dispatcher.enqueue_catch_up, self.watch_interval_s,
                                         on_look=self._look)
        self.watcher.lends_to = lambda target: self.membership.node_reads(target, LENT_WAL_RANGES)
        self.watcher.start()
        self.balancer.start()

    def _look(self) -> None:
        """After each look of the watcher: failovers, and the WAL ranges moves lent (cluster/handoff_wal.py)."""
        assert self.failover is not None
        self.failover.check()
        if self.wal_store is None:
            return
        self.parts.storage.release_lent()
        if time.monotonic() - self._dropped_at > 1.0:
            self._dropped_at = time.monotonic()
            handoff_wal.drop_committed(self.meta)
            handoff_wal.sweep_kept(self.meta, self.wal_store)  # a failed-over lender's WAL objects, once read

    # -- answers for the partitions layer ---------------------------------------------------------
    def leader_elsewhere(self, p: Partition) -> tuple[int, str | None] | None:
        want = leaders(self.meta).get((p.topic.topic_id, p.index))
        if want is None or want.node == self.node_id:
            return None
        node = self.membership.alive().get(want.node)
        return (want.node, node.http) if node is not None else None

    def remote_message(self, topic: str, partition: int, offset: int) -> OutMessage | None:
        info = self.parts.cached_topic(topic)
        if info is None:
            return None
        where = self.leader_elsewhere(self.parts.get(topic, partition))
        if where is None or where[1] is None:
            return None
        return self.peers.message(where[1], topic, partition, offset)

    def query(self, topic: str, key: str, max_count: int, begin_ms: int, end_ms: int | None) -> list[IndexHit]:
        assert self.index is not None
        return self.index.query(topic, key, max_count, begin_ms, end_ms)

    # -- topics and moves ---------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int, configs: dict[str, int] | None = None,
                     wait_s: float = 30.0) -> TopicInfo:
        """Create the topic with its partitions spread over the live nodes; returns once each is served."""
        info = self.parts.registry.create(name, partitions, configs)
        new = self.parts.add_topic(info)
        chosen = self._spread_new(partitions)
        set_leaders(self.meta, {(info.topic_id, i): node for i, node in enumerate(chosen)})
        mine = [p for p in new if chosen[p.index] == self.node_id]
        self.parts.claim(mine)
        self.parts.write_states([p for p in mine if p.owned], clean=False)
        self._wait_served(info, chosen, wait_s)
        return info

    def add_partitions(self, name: str, count: int, wait_s: float = 30.0) -> TopicInfo:
        """Grow the topic to `count` partitions (TopicRegistry.add_partitions), the new ones spread over the live
        nodes as a creation spreads them; returns once each new partition is served. The other nodes learn the
        count at their watcher's next look, and their leaders of new partitions open them then."""
        chosen: list[int] = []

        def leaders_of_new(before: TopicInfo, count: int) -> dict[str, str]:
            """The new partitions' leaders, spread as a creation spreads them, written with the count (a count
            without its leaders would leave the new partitions opened by no node)."""
            chosen[:] = self._spread_new(count - before.partitions)
            return leader_items(next_leaders(self.meta, {(before.topic_id, before.partitions + i): node
                                                         for i, node in enumerate(chosen)}))

        before, after = self.parts.registry.add_partitions(name, count, also_put=leaders_of_new)
        new = [p for p in self.parts.add_topic(after) if p.index >= before.partitions]
        mine = [p for p in new if chosen[p.index - before.partitions] == self.node_id]
        self.parts.claim(mine)
        self.parts.write_states([p for p in mine if p.owned], clean=False)
        self._wait_served(after, [None] * before.partitions + chosen, wait_s)
        return after

    def _spread_new(self, partitions: int) -> list[int]:
        """A leader for each of `partitions` new partitions: the least loaded live node each time."""
        load: dict[int, int] = {}
        for lead in leaders(self.meta, refresh=True).values():
            load[lead.node] = load.get(lead.node, 0) + 1
        alive = leaving.staying(self.meta, self.membership.alive(max_age_s=0)) | {self.node_id}
        return spread(partitions, alive, load)

    def delete_topic(self, name: str) -> TopicInfo:
        """Delete the topic from any node: its streams, keys, configs, group offsets and leader assignments go
        in one metadata transaction; this node forgets it now, the leaders at their watcher's next look (they
        drop what they cached of it, so none of it is uploaded or replayed from the WAL)."""
        info = self.parts.registry.delete(name, also_drop=lambda i: lambda key: key.startswith(
            f"{PREFIX}{i.topic_id}/"))
        self.parts.forget_topic(info.name, info.topic_id)
        return info

    def _wait_served(self, info: TopicInfo, chosen: list[int | None], wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        for i, node in enumerate(chosen):
            if node is None:  # a partition that was served before (partitions added): not waited for
                continue
            sid = info.streams[i].data_stream
            while True:
                s = self.meta.get_stream(sid)
                if s.state == OPENED and s.owner == node:
                    break
                if time.monotonic() > deadline:
                    raise StorageUnavailable("cluster", None, f"partition {info.name}-{i} not opened by node {node} "
                                                              f"after {wait_s}s")
                time.sleep(0.02)

    def reassign(self, topic: str, partition: int, target: int, wait_s: float = 30.0, kind: str = "reassign",
                 reason: str = "requested") -> dict[str, Any]:
        """Record `target` as the partition's leader and wait until it serves the partition."""
        started = time.monotonic()
        at_ms = now_ms()
        info = self.parts.topic(topic)
        p = self.parts.partition(info, partition)
        alive = self.membership.alive(0)
        if isinstance(target, bool) or not isinstance(target, int) or target not in alive:
            raise NodeNotLive(target)
        if target not in leaving.staying(self.meta, alive):
            raise NodeNotLive(target, "it is stopping")
        old = leaders(self.meta, refresh=True).get((info.topic_id, partition))
        current = self.meta.get_stream(p.data_stream)
        before = current.epoch
        if (old is not None and old.node == target and current.state == OPENED and current.owner == target
                and (target != self.node_id or self.parts.get(info.name, partition).owned)):
            # already led and served there: nothing to move, no epoch raised
            return {"topic": topic, "partition": partition, "from": target, "to": target, "leader_epoch": old.epoch,
                    "stream_epoch": current.epoch, "seconds": round(time.monotonic() - started, 3), "unchanged": True}
        lead = set_leaders(self.meta, {(info.topic_id, partition): target})[(info.topic_id, partition)]
        deadline = time.monotonic() + wait_s
        while True:
            s = self.meta.get_stream(p.data_stream)
            opened = s.state == OPENED and s.owner == target and (s.epoch > before or old is None or old.node == target)
            # served once the previous leader's WAL is replayed, after the metadata says opened: here, the partition
            # is owned; on another node, it answers a read (before, a client sent there at once got a 503). The
            # target is looked up each time: restarted meanwhile, it listens on a new address; not live, it serves
            # nothing (a node with no HTTP listener, in the broker's own process, serves once opened)
            there = self.membership.alive().get(target) if opened and target != self.node_id else None
            if opened and (self.parts.get(info.name, partition).owned if target == self.node_id
                           else there is not None and (not there.http or self.peers.serves(there.http.rstrip("/"),
                                                                                             topic, partition))):
                break
            if time.monotonic() > deadline:
                raise StorageUnavailable("cluster", None, f"{p.name} not served by node {target} after {wait_s}s")
            time.sleep(0.01)
        seconds = time.monotonic() - started
        record_move(self.meta, {"at_ms": at_ms, "topic_id": info.topic_id, "topic": topic, "partition": partition,
                                "from": None if old is None else old.node, "to": target, "kind": kind,
                                "reason": reason, "by": self.node_id, "seconds": round(seconds, 3)})
        log.info("partition reassigned", extra={"topic": topic, "partition": partition, "target": target,
                                                "source": None if old is None else old.node, "seconds": seconds})
        return {"topic": topic, "partition": partition, "from": None if old is None else old.node, "to": target,
                "leader_epoch": lead.epoch, "stream_epoch": s.epoch, "seconds": round(seconds, 3), "unchanged": False}

    def rebalance(self, execute: bool, by: str = "load") -> dict[str, Any]:
        """The plan (and with execute, the moves done one by one), by measured load (the balancer's plan,
        cluster/balance_plan.py) or by partition count (`by="count"`)."""
        names = {p.topic.topic_id: p.topic.name for p in self.parts.all()}
        plan = [{"topic": names[m.topic_id], "partition": m.partition, "from": m.source, "to": m.target}
                for m in self.rebalance_plan(by)]
        done = [self.reassign(m["topic"], m["partition"], m["to"], kind="rebalance", reason=f"rebalance by {by}")
                for m in plan] if execute else []
        return {"plan": plan, "executed": done, "by": by}

    def rebalance_plan(self, by: str = "load") -> list[Move]:
        if by not in ("load", "count"):
            raise ValueError(f"rebalance by {by!r}: by load or by count")
        current: dict[tuple[int, int], int | None] = {}
        lead = leaders(self.meta, refresh=True)
        for p in self.parts.all():
            want = lead.get((p.topic.topic_id, p.index))
            current[(p.topic.topic_id, p.index)] = None if want is None else want.node
        alive = self.membership.alive(0)
        if by == "count":
            return plan_rebalance(current, alive)
        reports = read_reports(self.meta, alive, now_ms(), int(3 * self.balancer.config.report_s * 1000) + 5000)
        return plan_by_load(current, partition_scores(reports), alive)

    def moves(self) -> list[dict[str, Any]]:
        """Recorded moves, newest first (cluster/moves.py)."""
        return recorded_moves(self.meta)

    def nodes(self) -> list[dict[str, Any]]:
        led: dict[int, list[str]] = {}
        names = {p.topic.topic_id: p.topic.name for p in self.parts.all()}
        for (tid, part), lead in sorted(leaders(self.meta, refresh=True).items()):
            if tid in names:
                led.setdefault(lead.node, []).append(f"{names[tid]}-{part}")
        return [n.as_dict() | {"partitions": led.get(n.node_id, [])} for n in self.membership.nodes()]

    def publish_index(self, index: Any) -> None:
        """Publish this node's uploaded index files, then move its index claims past what they hold (the
        ranges read first: a file counts as uploaded only if the list published after it has it)."""
        ranges = index.offset_ranges()
        files = index_file_rows(index)
        publish_files(self.meta, self.node_id, files, {loc: rs for loc, _state, rs in ranges})
        if self.parts.index_claims is not None:
            self.parts.index_claims.narrow(ranges, {f["location"] for f in files if f["state"] == "UPLOADED"})

    def others_alive(self) -> bool:
        return any(n != self.node_id for n in self.membership.alive(0))

    def drain(self) -> int:
        """Graceful shutdown: hand every partition led here, and every one assigned here not opened yet, to the
        other live nodes not stopping themselves (broker/cluster/leaving.py). Returns how many moved.

        Two nodes stopping at once see each other's announcement: each announces, then reads the leaders (this
        one, after its watcher stopped: it takes nothing more), and reads who stays again after recording its
        targets. Of two such writes on the metadata log one comes first, so either the second node finds the
        partition assigned to it and hands it on, or the first node finds its target stopping and picks again."""
        leaving.announce(self.meta, self.node_id, self.membership.node_epoch)
        others = sorted(leaving.staying(self.meta, self.membership.alive(0)) - {self.node_id})
        if not others or self.watcher is None:
            return 0
        self.watcher.stop()
        owned = self.parts.owned()
        lead = leaders(self.meta, refresh=True)
        keys = [(p.topic.topic_id, p.index) for p in owned]
        mine = set(keys)
        unopened = sorted(k for k, w in lead.items() if w.node == self.node_id and k not in mine)
        if not owned and not unopened:
            return 0
        keys += unopened
        load: dict[int, int] = {}
        for w in lead.values():
            load[w.node] = load.get(w.node, 0) + 1
        targets = spread(len(keys), others, load)
        set_leaders(self.meta, dict(zip(keys, targets, strict=True)))
        stay = leaving.staying(self.meta, self.membership.alive(0))
        if set(targets) - stay and set(others) & stay:  # a target announced its stop meanwhile: pick again
            others = sorted(set(others) & stay)
            again = [i for i, t in enumerate(targets) if t not in stay]
            for i, t in zip(again, spread(len(again), others, load), strict=True):
                targets[i] = t
            set_leaders(self.meta, dict(zip(keys, targets, strict=True)))
        targets = targets[:len(owned)]
        lent_to = {s.stream_id: t for p, t in zip(owned, targets, strict=True) for s in p.streams}  # before the
        moved = 0  # hand-offs, which close the partitions' streams here
        for p, t in zip(owned, targets, strict=True):
            moved += hand_off(self.parts, p, t, self.watcher.sync_index, lend=self.watcher.lends_to(t))
        if self.wal_store is not None:
            self._wait_lent_committed(lent_to)
        log.info("drained", extra={"node_id": self.node_id, "partitions": moved, "unopened": len(unopened),
                                   "to": sorted(set(targets))})
        return moved

    def _wait_lent_committed(self, lent_to: dict[int, int], wait_s: float = 30.0) -> None:
        """After a drain over the shared WAL: wait (bounded) until the targets have committed what they read from
        this node's WAL, so that a clean stop leaves it trimmed (else its objects stay until this node returns).
        `lent_to`: stream id -> the node it was handed to. The wait ends once each stream still lent went to a
        node that has stopped or is stopping (broker/cluster/leaving.py): such a node commits nothing more, and
        whoever leads those partitions next reads them from this node's WAL. A stream lent by an earlier move
        (its target not known here) is waited for up to the bound, as before."""
        storage = self.parts.storage
        deadline = time.monotonic() + wait_s
        while storage.holds.lent_ids() and time.monotonic() < deadline:
            self.meta.catch_up()
            storage.release_lent()
            waiting = storage.holds.lent_ids()
            if waiting and waiting <= lent_to.keys():
                stay = leaving.staying(self.meta, self.membership.alive(), refresh=False)  # caught up above
                if not any(lent_to[sid] in stay for sid in waiting):
                    log.info("the nodes the partitions went to are stopping too; not waiting for them to commit",
                             extra={"node_id": self.node_id, "to": sorted({lent_to[sid] for sid in waiting}),
                                    "streams": len(waiting)})
                    break
            time.sleep(0.05)
        left = storage.holds.lent_ids()
        if left:
            log.warning("stopping with moved records the new leaders have not committed yet; this node's WAL "
                        "objects holding them stay until they do and it returns", extra={
                            "node_id": self.node_id, "streams": len(left)})

    def leave(self, dispatcher: Dispatcher, index: Any) -> None:
        """Clean stop: hand the partitions to the other live nodes; with others alive, upload every index file
        and publish them so any node reads them while this one is away."""
        try:
            if self.drain() or self.others_alive():
                dispatcher.wait_idle(60.0)
                index.roll()
                index.maintain()
                self.publish_index(index)
        except Exception as exc:  # noqa: BLE001 - the node still closes cleanly; the others take over later
            log.error("leaving the cluster incompletely", extra={"node_id": self.node_id, "error": str(exc)})

    def _unfit(self) -> str | None:
        """Why this node should give up its lease: its WAL (or the node) failed for good, so it acknowledges
        nothing and cannot hand its partitions over; the others fail it over once the lease expires. With a local
        WAL, only once every record it acknowledged is uploaded (the uploader goes on meanwhile)."""
        storage = self.parts.storage
        if storage.failed is None:
            return None
        if self.wal_store is None and storage.cache.size:
            return None  # a local WAL: only this node has the acknowledged records it has not uploaded yet
        return f"the node failed and acknowledges nothing more: {storage.failed}"

    def _lease_lost(self) -> None:
        self.parts.storage.check_fenced([s.stream_id for p in self.parts.owned() for s in p.streams],
                                        RuntimeError("this node's lease belongs to a newer incarnation"))

    def stop_watching(self) -> None:
        """Stop reconciling partitions and answering for other nodes; the lease is kept (`stop`)."""
        self.balancer.stop()
        if self.watcher is not None:
            self.watcher.stop()
        if self.failover is not None:
            self.failover.stop()  # after the watcher, whose looks start its runs
        if self.index is not None:
            self.index.close()

    def stop(self, shut_down: bool = True) -> None:
        """Stop everything; the lease is marked shut down only with `shut_down` (a clean stop: every stream
        closed). Otherwise it is left to expire, so the other nodes fail this one over as after a crash: a node
        that stopped with streams open would never be failed over, and its partitions stay unserved."""
        self.stop_watching()
        self.membership.stop(shut_down)
        self.peers.close()
