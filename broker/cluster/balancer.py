"""The self-balancer: moves partitions off a node whose measured load stays above the mean.

Every node runs it every `report_s`: it reports its partitions' load (cluster/load_report.py). The live node
with the lowest id (from the leases in the metadata, the same rule as the failover leader) also decides:
- with fresh reports of every live node, a node's load (the scores of the partitions it leads) more than
  `threshold` above the mean, for `sustain_s` on end, gets one move planned off it (cluster/balance_plan.py:
  the heaviest partition whose move to the lightest node still leaves that node no heavier than the source),
  never of a partition moved (by anyone) in the last `cooldown_s`;
- one move at a time: the next decision waits until the target serves the moved partition (at most
  `move_timeout_s`), and the load measured after it (the timers start again);
- nothing while a failover is under way (an expired node still leads or holds partitions, or a replay of a
  dead node's WAL is recorded) or any partition is between two owners.
Each decision is logged with its reason and recorded (cluster/moves.py, GET /v1/cluster/moves).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from broker.cluster.assignment import leaders, set_leaders
from broker.cluster.balance_plan import plan_by_load
from broker.cluster.failover import REPLAYS_PREFIX
from broker.cluster.load_report import LoadReporter, partition_scores, read_reports
from broker.cluster.membership import Membership
from broker.cluster.moves import moved_since, record_move
from broker.metadata import MetadataClient
from broker.metadata.image import OPENED
from broker.metadata.leases import EXPIRED
from broker.partitions.partition_map import PartitionMap, now_ms
from broker.periodic import Periodic

log = logging.getLogger("mqindex.broker.balancer")

TP = tuple[int, int]


@dataclass(frozen=True)
class BalanceConfig:
    enabled: bool = True  # --auto-balance
    threshold: float = 0.3  # --auto-balance-threshold: fraction above the mean load
    sustain_s: float = 120.0  # --auto-balance-sustain-s
    cooldown_s: float = 600.0  # --auto-balance-cooldown-s: a partition moved lately is not moved again
    report_s: float = 10.0  # --auto-balance-report-s: load reports and decisions
    move_timeout_s: float = 60.0


def balance_settings(config: BalanceConfig) -> dict[str, Any]:
    """The effective settings under their `serve` names (GET /v1/config)."""
    return {"auto_balance": int(config.enabled), "auto_balance_threshold": config.threshold,
            "auto_balance_sustain_s": config.sustain_s, "auto_balance_cooldown_s": config.cooldown_s,
            "auto_balance_report_s": config.report_s}


class Balancer:
    def __init__(self, parts: PartitionMap, meta: MetadataClient, membership: Membership,
                 config: BalanceConfig) -> None:
        self.parts = parts
        self.meta = meta
        self.membership = membership
        self.node_id = membership.node_id
        self.config = config
        self.reporter = LoadReporter(parts, meta, self.node_id)
        self._over: dict[int, float] = {}  # node -> since when (monotonic) its load is over the bound
        self._inflight: tuple[TP, int, float] | None = None  # the last move: partition, target, when
        self._quiet_logged: set[int] = set()
        self._periodic = Periodic("broker-balancer", config.report_s, self.tick)

    def start(self) -> None:
        self._periodic.start()

    def stop(self) -> None:
        self._periodic.stop()

    def tick(self) -> dict[str, Any] | None:
        """Report this node's load; on the deciding node, maybe start one move (returned)."""
        alive = sorted(self.membership.alive(0))
        if len(alive) < 2:
            self._reset()
            return None
        self.reporter.report(now_ms())
        if not self.config.enabled or alive[0] != self.node_id or not self.membership.steady():
            self._reset()
            return None
        self.meta.catch_up()
        if self._inflight is not None and not self._settled():
            return None
        if self._failover_under_way() or self._move_under_way():
            self._over.clear()
            return None
        return self._decide(alive)

    def _reset(self) -> None:
        self._over.clear()
        self._inflight = None

    def _settled(self) -> bool:
        assert self._inflight is not None
        (tid, part), target, since = self._inflight
        p = next((q for q in self.parts.all() if q.topic.topic_id == tid and q.index == part), None)
        s = None if p is None else self.meta.image.streams.get(p.data_stream)
        if s is None or (s.state == OPENED and s.owner == target):
            self._inflight = None
            self._over.clear()  # measure again, with the partition where it is now
            return False  # decide at the next tick, after a fresh report
        if time.monotonic() - since > self.config.move_timeout_s:
            log.warning("balancer move not done in time; deciding again", extra={
                "topic_id": tid, "partition": part, "target": target, "seconds": self.config.move_timeout_s})
            self._reset()
        return False

    def _failover_under_way(self) -> bool:
        if self.meta.kv_items(REPLAYS_PREFIX, refresh=False):
            return True
        dead = {n.node_id for n in self.membership.nodes() if n.state == EXPIRED}
        if not dead:
            return False
        if any(lead.node in dead for lead in leaders(self.meta).values()):
            return True
        return any(s.state == OPENED and s.owner in dead for s in self.meta.image.streams.values())

    def _move_under_way(self) -> bool:
        lead = leaders(self.meta)
        for p in self.parts.all():
            want = lead.get((p.topic.topic_id, p.index))
            s = self.meta.image.streams.get(p.data_stream)
            if want is not None and s is not None and not (s.state == OPENED and s.owner == want.node):
                return True
        return False

    def _decide(self, alive: list[int]) -> dict[str, Any] | None:
        cfg = self.config
        wall = now_ms()
        reports = read_reports(self.meta, alive, wall, int(3 * cfg.report_s * 1000) + 5000)
        if set(reports) != set(alive):
            return None  # a live node's load is not known yet
        lead = leaders(self.meta)
        current: dict[TP, int | None] = {}
        for p in self.parts.all():
            want = lead.get((p.topic.topic_id, p.index))
            if want is not None and want.node in alive:  # (a partition led by no live node is the failover's)
                current[(p.topic.topic_id, p.index)] = want.node
        scores = partition_scores(reports)
        load = dict.fromkeys(alive, 0.0)
        for tp, n in current.items():
            if n in load:
                load[n] += scores.get(tp, 0.0)
        mean = sum(load.values()) / len(alive)
        bound = mean * (1 + cfg.threshold)
        mono = time.monotonic()
        over = {n for n, x in load.items() if mean > 0 and x > bound}
        self._over = {n: self._over.get(n, mono) for n in over}
        self._quiet_logged &= over
        due = sorted((n for n in over if mono - self._over[n] >= cfg.sustain_s), key=lambda n: (-load[n], n))
        for src in due:
            frozen = moved_since(self.meta, wall - int(cfg.cooldown_s * 1000))
            plan = plan_by_load(current, scores, alive, frozen=frozen, only_from=src, max_moves=1)
            if not plan:
                if src not in self._quiet_logged:
                    self._quiet_logged.add(src)
                    log.info("balancer: node over the mean load, but no move evens it out", extra={
                        "node_id": src, "load": round(load[src]), "mean": round(mean)})
                continue
            m = plan[0]
            tp = (m.topic_id, m.partition)
            name = next((p.topic.name for p in self.parts.all() if p.topic.topic_id == m.topic_id), str(m.topic_id))
            reason = (f"node {src} load {load[src]:.0f} B/s is {load[src] / mean - 1:.0%} above the mean {mean:.0f} "
                      f"B/s (bound +{cfg.threshold:.0%}) for {mono - self._over[src]:.0f} s; partition load "
                      f"{scores.get(tp, 0.0):.0f} B/s, node {m.target} load {load[m.target]:.0f} B/s")
            doc = {"at_ms": wall, "topic_id": m.topic_id, "topic": name, "partition": m.partition, "from": src,
                   "to": m.target, "kind": "auto", "reason": reason, "by": self.node_id,
                   "loads": {str(n): round(x, 1) for n, x in load.items()}, "mean": round(mean, 1)}
            set_leaders(self.meta, {tp: m.target})
            record_move(self.meta, doc)
            log.info("balancer moves a partition", extra={"topic": name, "partition": m.partition, "source": src,
                                                          "target": m.target, "reason": reason})
            self._inflight = (tp, m.target, mono)
            self._over.clear()
            return doc
        return None
