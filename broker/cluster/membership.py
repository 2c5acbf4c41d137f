"""Membership: this node's lease (register, heartbeat, shut down) and the view of every node's lease."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from broker.errors import NotOwner
from broker.metadata.leases import ALIVE, LeaseTable, NodeLease
from broker.periodic import Periodic

log = logging.getLogger("mqindex.broker.cluster")

DEFAULT_LEASE_MS = 10_000


class Membership:
    def __init__(self, leases: LeaseTable, node_id: int, node_epoch: int, http: str | None, kafka: str | None,
                 lease_ms: int = DEFAULT_LEASE_MS, on_fenced: Callable[[], None] | None = None) -> None:
        self.leases = leases
        self.node_id = node_id
        self.node_epoch = node_epoch
        self.http = http
        self.kafka = kafka
        self.lease_ms = lease_ms
        self.on_fenced = on_fenced or (lambda: None)
        self.fenced = False
        #: why this node should not keep its lease (None: it may); asked before each renewal (the cluster sets it:
        #: a node whose WAL failed for good serves nothing, and lets its lease expire so the others take over)
        self.unfit: Callable[[], str | None] = lambda: None
        self._gave_up = False
        # monotonic time until which this node surely holds its lease: the time a renewal that succeeded was sent,
        # plus the lease (the metadata's expiry counts from when it applied the renewal, which is later)
        self.held_until = 0.0
        # monotonic time since which this node has held its lease without a gap (see `steady`)
        self.steady_since = 0.0
        self._view: tuple[float, dict[int, NodeLease]] = (0.0, {})
        self._beat = Periodic("broker-heartbeat", max(lease_ms / 3000, 0.05), self.heartbeat)

    def start(self) -> None:
        sent = time.monotonic()
        self.leases.register(self.node_id, self.node_epoch, self.http, self.kafka, self.lease_ms)
        self.held_until = sent + self.lease_ms / 1000
        self.steady_since = sent
        self._beat.start()
        log.info("node registered", extra={"node_id": self.node_id, "node_epoch": self.node_epoch,
                                           "http": self.http, "lease_ms": self.lease_ms})

    def heartbeat(self) -> None:
        if self.fenced:
            return
        why = self.unfit()
        if why is not None:
            if not self._gave_up:
                self._gave_up = True
                log.error("lease no longer renewed: the others will fail this node over", extra={
                    "node_id": self.node_id, "node_epoch": self.node_epoch, "reason": why})
            return
        sent = time.monotonic()
        if not self.leases.heartbeat(self.node_id, self.node_epoch, self.lease_ms):
            self.fenced = True
            log.error("lease lost: a newer incarnation of this node registered", extra={
                "node_id": self.node_id, "node_epoch": self.node_epoch})
            self.on_fenced()
            return
        if sent > self.held_until:  # the lease had run out before this renewal: held again only from now
            self.steady_since = sent
        self.held_until = sent + self.lease_ms / 1000

    def steady(self) -> bool:
        """Whether this node has held its lease without a gap for a whole lease. Only then may it count other
        nodes' expired leases as their failure: after the metadata database stalled (or this node could not
        reach it) for longer than a lease, every lease is expired at once, and the other nodes get a lease's time
        to renew theirs before any is failed over."""
        return not self.fenced and time.monotonic() - self.steady_since >= self.lease_ms / 1000

    def check_lease(self) -> None:
        """Raise NotOwner unless this node surely still holds its lease. A node that cannot renew it (the
        metadata database unreachable) must stop acknowledging before the others may take its partitions over:
        with a local WAL they would open them at the committed end while this node went on writing the same
        offsets."""
        if self.fenced:
            raise NotOwner(f"node {self.node_id}: its lease belongs to a newer incarnation; not acknowledging")
        left = self.held_until - time.monotonic()
        if left <= 0:
            raise NotOwner(f"node {self.node_id} could not renew its lease for {self.lease_ms} ms (the metadata "
                           "database does not answer): not acknowledging until it can")

    def nodes(self) -> list[NodeLease]:
        return self.leases.nodes()

    def alive(self, max_age_s: float = 0.5) -> dict[int, NodeLease]:
        """Live nodes (this one included), from a view at most `max_age_s` old."""
        at, view = self._view
        if time.monotonic() - at > max_age_s:
            view = {n.node_id: n for n in self.leases.nodes() if n.state == ALIVE}
            self._view = (time.monotonic(), view)
        return view

    def address(self, node_id: int) -> str | None:
        n = self.alive().get(node_id)
        return n.http if n is not None else None

    def stop(self, shut_down: bool = True) -> None:
        self._beat.stop()
        if shut_down and not self.fenced:
            self.leases.shut_down(self.node_id, self.node_epoch)
        self.leases.close()
